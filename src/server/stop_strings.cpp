#include "server/stop_strings.h"

#include <algorithm>

namespace ds::server {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopStringFilter::push(std::string_view text) {
  if (stopped_) return "";
  held_ += text;
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold the longest suffix that is a proper prefix of some stop string. Stop strings are valid UTF-8, so the
  // cut falls on a character boundary.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(held_.size(), stop.size() - 1); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringFilter::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace ds::server
