// The template engine's own behaviour: error positions, the public API, and inputs jinja2 goldens don't
// cover.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>

#include "tokenizer/jinja_interpreter.h"

namespace ds {
namespace {

using nlohmann::ordered_json;

std::string render(const std::string& source, const ordered_json& context = ordered_json::object()) {
  return ChatTemplate(source).render(context);
}

std::string error_of(const std::string& source, const ordered_json& context = ordered_json::object()) {
  try {
    render(source, context);
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ChatTemplate, SyntaxErrorsNameLineColumnAndConstruct) {
  EXPECT_EQ(error_of("line one\n{% if x %}\nno end"),
            "chat template syntax error at line 3, column 7: unexpected end of template, expected 'elif'");
  EXPECT_EQ(error_of("a\n  {{ 1 + }}"),
            "chat template syntax error at line 2, column 10: unexpected end of print statement '}}'");
  EXPECT_EQ(error_of("{% frobnicate %}"),
            "chat template syntax error at line 1, column 4: unknown tag 'frobnicate'");
  EXPECT_EQ(error_of("\n\n{{ x | nosuch }}"),
            "chat template syntax error at line 3, column 8: no filter named 'nosuch'");
  EXPECT_EQ(error_of("{{ x is nosuch }}"),
            "chat template syntax error at line 1, column 9: no test named 'nosuch'");
  EXPECT_EQ(error_of("{{ 'open }}"),
            "chat template syntax error at line 1, column 4: unterminated string literal");
  EXPECT_EQ(error_of("x {# never closed"),
            "chat template syntax error at line 1, column 3: missing end of comment tag");
  EXPECT_EQ(error_of("{{ (1 }}"),
            "chat template syntax error at line 1, column 7: unexpected '}', expected ')'");
  EXPECT_EQ(error_of("{% break %}"),
            "chat template syntax error at line 1, column 4: 'break' outside of a loop");
  EXPECT_EQ(
      error_of("{% include 'x' %}"),
      "chat template syntax error at line 1, column 4: '{% include %}' is not supported in chat templates");
}

// Runtime errors point at the operator, '.', '[' or '(' of the construct that failed.
TEST(ChatTemplate, RuntimeErrorsNameLineColumn) {
  EXPECT_EQ(
      error_of("ok\n{{ 'a' + 1 }}"),
      "chat template error at line 2, column 8: TypeError: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(
      error_of("{% for m in messages %}\n  {{ m.content.x.y }}{% endfor %}",
               {{"messages", {{{"role", "u"}}}}}),
      "chat template error at line 2, column 15: UndefinedError: 'dict object' has no attribute 'content'");
  EXPECT_EQ(error_of("{{ nope() }}"),
            "chat template error at line 1, column 8: UndefinedError: 'nope' is undefined");
}

TEST(ChatTemplate, RaiseExceptionKeepsItsMessage) {
  try {
    render("{%- if not messages %}\n  {{- raise_exception('No messages provided.') }}\n{%- endif %}",
           {{"messages", ordered_json::array()}});
    FAIL() << "expected an exception";
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.reason(), "No messages provided.");
    EXPECT_EQ(e.line(), 2);
    EXPECT_EQ(e.column(), 22);  // the '(' of the call that raised
  }
}

TEST(ChatTemplate, RaiseInsideMacroPointsAtTheMacroBody) {
  try {
    render("{% macro check(x) %}\n{{ raise_exception('bad ' ~ x) }}\n{% endmacro %}\n{{ check(3) }}");
    FAIL() << "expected an exception";
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.reason(), "bad 3");
    EXPECT_EQ(e.line(), 2);
  }
}

TEST(ChatTemplate, ContextKeyOrderIsKept) {
  // tojson of tool schemas depends on insertion order, which ordered_json keeps.
  ordered_json tool =
      ordered_json::parse(R"({"type": "function", "function": {"name": "f", "parameters": {}}})");
  EXPECT_EQ(render("{{ t | tojson }}", {{"t", tool}}),
            R"({"type": "function", "function": {"name": "f", "parameters": {}}})");
}

TEST(ChatTemplate, WhitespaceControl) {
  EXPECT_EQ(render("{% if true %}\n  a\n{% endif %}\n"), "  a\n");  // trim_blocks, no trailing \n
  EXPECT_EQ(render("  {% if true %}a{% endif %}"), "a");            // lstrip_blocks
  EXPECT_EQ(render("x  {% if true %}a{% endif %}"), "x  a");        // only at line start
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");                          // not for variables
  EXPECT_EQ(render("a \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(render("  {%+ if true %}a{% endif %}"), "  a");
  EXPECT_EQ(render("{% if true +%}\na{% endif %}"), "\na");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(ChatTemplate, ApplyNormalizesMessagesLikeTransformers) {
  ChatTemplate t(
      "{% for m in messages %}{{ m | tojson }}\n{% endfor %}{{ tools }}|{{ documents }}|{{ "
      "add_generation_prompt }}");
  ordered_json messages = ordered_json::parse(
      R"([{"role": "user", "content": "hi", "name": null},
          {"role": "assistant", "content": "ok", "reasoning": "why"}])");
  EXPECT_EQ(t.apply(messages, nullptr, true),
            "{\"role\": \"user\", \"content\": \"hi\"}\n"
            "{\"thinking\": \"why\", \"role\": \"assistant\", \"content\": \"ok\", \"reasoning\": \"why\", "
            "\"reasoning_content\": \"why\"}\n"
            "None|None|True");
  EXPECT_THROW(t.apply(ordered_json::array(), nullptr, false), ds::Error);
}

TEST(ChatTemplate, ExtraVariablesReachTheTemplate) {
  ChatTemplate t("{{ bos_token }}{{ enable_thinking }}");
  EXPECT_EQ(t.apply(ordered_json::parse(R"([{"role": "user", "content": "x"}])"), nullptr, false,
                    {{"bos_token", "<s>"}, {"enable_thinking", false}}),
            "<s>False");
}

TEST(ChatTemplate, StrftimeNowFormatsTheLocalTime) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string year = std::to_string(local.tm_year + 1900);
  std::string got = render("{{ strftime_now('%Y') }}");
  // Allow a new year to start between the two reads.
  EXPECT_TRUE(got == year || got == std::to_string(local.tm_year + 1901)) << got;
}

TEST(ChatTemplate, FromModelDirPrefersJinjaFileThenTokenizerConfig) {
  auto dir = std::filesystem::temp_directory_path() / ("ds_chat_template_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                     {"name": "default", "template": "D{{ 1 + 1 }}"}]})";
  EXPECT_EQ(ChatTemplate::from_model_dir(dir).render(ordered_json::object()), "D2");
  std::ofstream(dir / "chat_template.jinja") << "J{{ 2 * 3 }}\n";
  EXPECT_EQ(ChatTemplate::from_model_dir(dir).render(ordered_json::object()), "J6");
  std::filesystem::remove_all(dir);
  EXPECT_THROW(ChatTemplate::from_model_dir(dir), ds::Error);
}

TEST(ChatTemplate, RealTemplatesParse) {
  for (const char* name : {"qwen3", "qwen3_5", "qwen3_next_thinking", "qwq", "qwen3_coder", "qwen2_5"}) {
    auto path = std::filesystem::path(DELTASERVE_SOURCE_DIR) / "tests/data/chat_templates" /
                (std::string(name) + ".jinja");
    std::ifstream in(path);
    std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NO_THROW(ChatTemplate{source}) << name;
  }
}

TEST(ChatTemplate, MacroRecursionIsBounded) {
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("RecursionError"),
            std::string::npos);
}

TEST(ChatTemplate, IntegerOverflowIsAnErrorNotWraparound) {
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("OverflowError"), std::string::npos);
}

}  // namespace
}  // namespace ds
