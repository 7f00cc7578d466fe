// `deltaserve run` on models/flashnext-tiny (a model with an MTP head): the engine's draft figures it prints
// after the reply, the draft guard's among them when --draft-guard is on.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

namespace ds {
namespace {

// Stdout+stderr and exit status of `deltaserve run MODEL ARGS`.
std::pair<std::string, int> run_tiny(const std::string& args) {
  const std::string cmd = "timeout 120 " + std::string(DELTASERVE_BINARY) + " run " + DELTASERVE_SOURCE_DIR +
                          "/models/flashnext-tiny -p 'Hello there' --max-tokens 12 --seed 1 " + args +
                          " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  return {out, pclose(pipe.release())};
}

// EngineStats::draft_rests and draft_catch_ups are printed with the guard on, and only then.
TEST(RunCommand, PrintsTheDraftGuardCounters) {
  auto [guarded, status] = run_tiny("--draft-guard");
  ASSERT_EQ(status, 0) << guarded;
  EXPECT_NE(guarded.find("[drafts: ms by rows:"), std::string::npos) << guarded;
  EXPECT_NE(guarded.find("[drafts: guard rested "), std::string::npos) << guarded;
  EXPECT_NE(guarded.find(" times; head catch-up rounds "), std::string::npos) << guarded;
  auto [plain, plain_status] = run_tiny("");
  ASSERT_EQ(plain_status, 0) << plain;
  EXPECT_EQ(plain.find("guard rested"), std::string::npos) << plain;
  auto [no_drafts, no_drafts_status] = run_tiny("--draft-guard --no-drafts");
  ASSERT_EQ(no_drafts_status, 0) << no_drafts;
  EXPECT_EQ(no_drafts.find("[drafts:"), std::string::npos) << no_drafts;
}

}  // namespace
}  // namespace ds
