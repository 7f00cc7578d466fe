// Byte-equality of the C++ chat template renderer with Python jinja2 as transformers configures it. The
// expected files come from tools/render_templates_reference.py over tests/data/chat_templates/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_interpreter.h"

namespace ds {
namespace {

using nlohmann::ordered_json;

const std::filesystem::path kData =
    std::filesystem::path(DELTASERVE_SOURCE_DIR) / "tests/data/chat_templates";

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// Compares one rendering (or its failure) with what jinja2 produced.
template <typename Render>
void check_case(const std::string& name, const ordered_json& expected, Render render) {
  SCOPED_TRACE(name);
  if (expected.contains("output")) {
    std::string got;
    try {
      got = render();
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": jinja2 rendered, C++ failed: " << e.what();
      return;
    }
    EXPECT_EQ(got, expected["output"].get<std::string>()) << name;
    return;
  }
  std::string error = expected["error"].get<std::string>();
  std::string type = error.substr(0, error.find(':'));
  std::string message = error.substr(error.find(':') + 2);
  try {
    std::string got = render();
    ADD_FAILURE() << name << ": jinja2 failed with '" << error << "' but C++ rendered: " << got;
  } catch (const jinja::TemplateError& e) {
    if (type == "TemplateError") {
      EXPECT_EQ(e.reason(), message) << name;  // raise_exception's text reaches the caller unchanged
    } else {
      EXPECT_EQ(e.reason().substr(0, e.reason().find(':')), type) << name << ": " << e.what();
    }
  } catch (const ds::Error& e) {
    // Syntax errors surface from the constructor, before any rendering.
    EXPECT_TRUE(type == "TemplateSyntaxError" || type == "TemplateAssertionError")
        << name << ": " << e.what();
  }
}

class ChatTemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGolden, MatchesJinja2OnEveryConversation) {
  const std::string stem = GetParam();
  ChatTemplate tmpl(read(kData / (stem + ".jinja")));
  ordered_json conversations = ordered_json::parse(read(kData / "conversations.json"));
  ordered_json expected = ordered_json::parse(read(kData / "expected" / (stem + ".json")))["cases"];
  ASSERT_EQ(expected.size(), conversations.size()) << "regenerate with tools/render_templates_reference.py";
  for (const auto& c : conversations) {
    std::string name = c["name"].get<std::string>();
    ASSERT_TRUE(expected.contains(name)) << name;
    check_case(name, expected[name], [&] {
      return tmpl.apply(c["messages"], c.value("tools", ordered_json()),
                        c.value("add_generation_prompt", false), c.value("kwargs", ordered_json::object()));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateGolden,
                         ::testing::Values("qwen3", "qwen3_5", "qwen3_next_thinking", "qwq", "qwen3_coder",
                                           "qwen2_5"));

TEST(ChatTemplateGolden, EngineCasesMatchJinja2) {
  ordered_json cases = ordered_json::parse(read(kData / "engine_cases.json"));
  ordered_json expected = ordered_json::parse(read(kData / "expected" / "engine.json"))["cases"];
  ASSERT_EQ(expected.size(), cases.size()) << "regenerate with tools/render_templates_reference.py";
  for (const auto& c : cases) {
    std::string name = c["name"].get<std::string>();
    check_case(name, expected[name],
               [&] { return ChatTemplate(c["template"].get<std::string>()).render(c["context"]); });
  }
}

}  // namespace
}  // namespace ds
