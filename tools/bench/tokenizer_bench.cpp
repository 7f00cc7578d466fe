// Encode speed of the C++ tokenizer on the parity corpus, one thread: best of N passes over all chunks, each
// chunk one encode() call (as tools/tokenizer_reference.py bench times HF). A plain main, not Google Benchmark:
// the corpus pass is the unit, and the output is a JSON line for docs/receipts/tokenizer-encode.md.
// Usage: tokenizer_bench TOKENIZER_JSON CORPUS_BIN [PASSES] [ascii]   (ascii: only the chunks that are pure
// ASCII)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> read_corpus(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  std::string data = s.str();
  std::vector<std::string> chunks;
  size_t pos = data.find('\n');
  if (pos == std::string::npos) throw std::runtime_error(fmt::format("{} is not a corpus file", path));
  for (++pos; pos + 4 <= data.size();) {
    uint32_t n;
    std::memcpy(&n, data.data() + pos, 4);
    chunks.push_back(data.substr(pos + 4, n));
    pos += 4 + n;
  }
  return chunks;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: {} TOKENIZER_JSON CORPUS_BIN [PASSES] [ascii]\n", argv[0]);
    return 2;
  }
  int passes = argc > 3 ? std::atoi(argv[3]) : 5;
  bool ascii_only = argc > 4 && std::string_view(argv[4]) == "ascii";
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  ds::Tokenizer tok = ds::Tokenizer::load(argv[1]);
  double load_s = std::chrono::duration<double>(clock::now() - t0).count();
  std::vector<std::string> chunks = read_corpus(argv[2]);
  if (ascii_only) {
    std::erase_if(chunks, [](const std::string& c) {
      return std::any_of(c.begin(), c.end(), [](char b) { return static_cast<unsigned char>(b) >= 0x80; });
    });
  }
  size_t bytes = 0;
  for (const auto& c : chunks) bytes += c.size();
  // Wall time and this process's CPU time: on a shared machine the CPU time is the steadier of the two.
  double best = 1e30, best_cpu = 1e30, first = 0;
  size_t tokens = 0;
  for (int p = 0; p < passes; ++p) {
    tokens = 0;
    auto start = clock::now();
    std::clock_t cpu_start = std::clock();
    for (const auto& c : chunks) tokens += tok.encode(c).size();
    double s = std::chrono::duration<double>(clock::now() - start).count();
    double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    if (p == 0) first = s;
    best = std::min(best, s);
    best_cpu = std::min(best_cpu, cpu);
  }
  fmt::print(
      "{{\"tokenizer\": \"{}\", \"chunks\": \"{}\", \"bytes\": {}, \"tokens\": {}, \"load_s\": {:.3f}, "
      "\"first_pass_s\": {:.4f}, "
      "\"best_s\": {:.4f}, \"mb_per_s\": {:.2f}, \"best_cpu_s\": {:.4f}, \"mb_per_cpu_s\": {:.2f}, "
      "\"first_pass_mb_per_s\": {:.2f}}}\n",
      argv[1], ascii_only ? "ascii" : "all", bytes, tokens, load_s, first, best, bytes / best / 1e6, best_cpu,
      bytes / best_cpu / 1e6, bytes / first / 1e6);
}
