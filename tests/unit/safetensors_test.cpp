#include "formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "expect_error.h"
#include "safetensors_writer.h"

namespace ds {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::RawTensor;
using test::TempDir;
using ::testing::HasSubstr;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 37 * i);
  return v;
}

TEST(Safetensors, RoundTripsEveryDtype) {
  TempDir dir;
  const std::vector<std::pair<std::string, DType>> dtypes = {
      {"BF16", DType::BF16}, {"F16", DType::F16}, {"F32", DType::F32}, {"F64", DType::F64},
      {"I64", DType::I64},   {"I32", DType::I32}, {"I16", DType::I16}, {"I8", DType::I8},
      {"U64", DType::U64},   {"U32", DType::U32}, {"U16", DType::U16}, {"U8", DType::U8},
      {"BOOL", DType::Bool}};
  std::vector<RawTensor> tensors;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const auto& [name, dt] = dtypes[i];
    tensors.push_back({"t_" + name, name, {2, 3}, pattern(6 * dtype_size(dt), static_cast<uint8_t>(i))});
  }
  tensors.push_back({"scalar", "F32", {}, pattern(4, 9)});
  tensors.push_back({"empty", "F32", {0, 5}, {}});
  test::write_safetensors(dir / "a.safetensors", tensors, {{"format", "pt"}, {"note", "test"}});

  SafetensorsFile f(dir / "a.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "test");
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const TensorInfo& t = f.tensors().at(tensors[i].name);
    EXPECT_EQ(t.dtype, dtypes[i].second) << tensors[i].name;
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.numel(), 6);
    EXPECT_EQ(t.file, dir / "a.safetensors");
    ASSERT_EQ(t.nbytes, tensors[i].bytes.size());
    EXPECT_EQ(std::memcmp(t.data, tensors[i].bytes.data(), t.nbytes), 0) << tensors[i].name;
  }
  EXPECT_EQ(f.tensors().at("scalar").numel(), 1);
  EXPECT_EQ(f.tensors().at("empty").numel(), 0);
  EXPECT_EQ(f.tensors().at("empty").nbytes, 0u);
}

TEST(Safetensors, ShardedIndexFindsEveryTensor) {
  TempDir dir;
  test::write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", "F32", {2}, pattern(8, 1)}});
  test::write_safetensors(dir / "model-00002-of-00002.safetensors",
                          {{"b", "U8", {3}, pattern(3, 2)}, {"c", "I64", {1}, pattern(8, 3)}});
  test::write_json(dir / "model.safetensors.index.json", {{"metadata", {{"total_size", 19}}},
                                                          {"weight_map",
                                                           {{"a", "model-00001-of-00002.safetensors"},
                                                            {"b", "model-00002-of-00002.safetensors"},
                                                            {"c", "model-00002-of-00002.safetensors"}}}});
  TensorStore store(dir.path());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(store.get("a").file, dir / "model-00001-of-00002.safetensors");
  EXPECT_EQ(store.get("c").file, dir / "model-00002-of-00002.safetensors");
  EXPECT_EQ(std::memcmp(store.get("b").data, pattern(3, 2).data(), 3), 0);
  EXPECT_TRUE(store.has("b"));
  EXPECT_FALSE(store.has("d"));
  std::string msg = error_of([&] { store.get("d"); });
  EXPECT_EQ(msg, "tensor 'd' not found in " + dir.path().string());
}

TEST(Safetensors, WithoutIndexReadsEveryFileAndRejectsDuplicates) {
  TempDir dir;
  test::write_safetensors(dir / "b.safetensors", {{"y", "F32", {1}, pattern(4, 1)}});
  test::write_safetensors(dir / "a.safetensors", {{"x", "F32", {1}, pattern(4, 2)}});
  test::write_file(dir / "notes.txt", "not a tensor file");
  {
    TensorStore store(dir.path());
    EXPECT_EQ(store.names(), (std::vector<std::string>{"x", "y"}));
  }
  test::write_safetensors(dir / "c.safetensors", {{"x", "F32", {1}, pattern(4, 3)}});
  std::string msg = error_of([&] { TensorStore store(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("'x'"));
  EXPECT_THAT(msg, HasSubstr("a.safetensors"));
  EXPECT_THAT(msg, HasSubstr("c.safetensors"));
}

TEST(Safetensors, EmptyDirectoryIsAnError) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { TensorStore store(dir.path()); }), HasSubstr(dir.path().string()));
  EXPECT_THAT(error_of([&] { TensorStore store(dir / "absent"); }), HasSubstr("absent"));
}

TEST(Safetensors, MissingShardNamesShardAndTensor) {
  TempDir dir;
  test::write_safetensors(dir / "s1.safetensors", {{"a", "F32", {1}, pattern(4, 1)}});
  test::write_json(dir / "model.safetensors.index.json",
                   {{"weight_map", {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}}});
  std::string msg = error_of([&] { TensorStore store(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("s2.safetensors"));
  EXPECT_THAT(msg, HasSubstr("'b'"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors.index.json"));
}

TEST(Safetensors, TensorMissingFromItsShardNamesBoth) {
  TempDir dir;
  test::write_safetensors(dir / "s1.safetensors", {{"a", "F32", {1}, pattern(4, 1)}});
  test::write_safetensors(dir / "s2.safetensors", {{"b", "F32", {1}, pattern(4, 2)}});
  test::write_json(
      dir / "model.safetensors.index.json",
      {{"weight_map", {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}}}});
  std::string msg = error_of([&] { TensorStore store(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("'b'"));
  EXPECT_THAT(msg, HasSubstr("s1.safetensors"));
}

TEST(Safetensors, BadIndexJsonNamesTheIndex) {
  TempDir dir;
  test::write_safetensors(dir / "s1.safetensors", {{"a", "F32", {1}, pattern(4, 1)}});
  test::write_file(dir / "model.safetensors.index.json", "{\"weight_map\": {");
  EXPECT_THAT(error_of([&] { TensorStore store(dir.path()); }), HasSubstr("model.safetensors.index.json"));
}

TEST(Safetensors, TruncatedFileNamesFileAndTensor) {
  TempDir dir;
  const fs::path p = dir / "model.safetensors";
  test::write_safetensors(p, {{"first", "F32", {4}, pattern(16, 1)}, {"second", "F32", {4}, pattern(16, 2)}});
  fs::resize_file(p, fs::file_size(p) - 5);
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p.string()));
  EXPECT_THAT(msg, HasSubstr("'second'"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
  // Through the store as well, since that is how checkpoints are opened.
  EXPECT_THAT(error_of([&] { TensorStore s(dir.path()); }), HasSubstr("'second'"));
}

TEST(Safetensors, HeaderLengthPastEndOfFile) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  test::write_raw(p, "{}", {}, 1000);
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p.string()));
  EXPECT_THAT(msg, HasSubstr("1000"));
  test::write_file(p, "abc");
  EXPECT_THAT(error_of([&] { SafetensorsFile f(p); }), HasSubstr(p.string()));
}

TEST(Safetensors, HeaderOverTheFormatLimitIsRefused) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  // A sparse file, so the claimed 100 MB+ header fits inside it without writing that much.
  test::write_raw(p, "{}", {}, 100'000'001);
  fs::resize_file(p, 100'000'100);
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p.string()));
  EXPECT_THAT(msg, HasSubstr("limit"));
}

TEST(Safetensors, TensorNamedTwiceInOneHeaderIsRefused) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  const std::string entry = R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})";
  test::write_raw(p, "{\"w\": " + entry + ", \"w\": " + entry + "}", pattern(4, 1));
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p.string()));
  EXPECT_THAT(msg, HasSubstr("'w' more than once"));
}

TEST(Safetensors, BadJsonNamesTheFile) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  test::write_raw(p, "{\"a\": {\"dtype\": \"F32\",", {});
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p.string()));
  EXPECT_THAT(msg, HasSubstr("JSON"));
  test::write_raw(p, "[1, 2]", {});
  EXPECT_THAT(error_of([&] { SafetensorsFile f(p); }), HasSubstr(p.string()));
}

TEST(Safetensors, UnknownDtypeNamesFileAndTensor) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  test::write_safetensors(p, {{"weird", "F8_E4M3X", {4}, pattern(4, 1)}});
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p.string()));
  EXPECT_THAT(msg, HasSubstr("'weird'"));
  EXPECT_THAT(msg, HasSubstr("F8_E4M3X"));
}

TEST(Safetensors, OverlappingOffsetsNameBothTensors) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  nlohmann::json h = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                      {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}};
  test::write_raw(p, h.dump(), pattern(12, 1));
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p.string()));
  EXPECT_THAT(msg, HasSubstr("'a'"));
  EXPECT_THAT(msg, HasSubstr("'b'"));
  EXPECT_THAT(msg, HasSubstr("overlap"));
}

TEST(Safetensors, ShapeTimesSizeMustEqualByteRange) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  nlohmann::json h = {{"w", {{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 8}}}}};
  test::write_raw(p, h.dump(), pattern(8, 1));
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p.string()));
  EXPECT_THAT(msg, HasSubstr("'w'"));
  EXPECT_THAT(msg, HasSubstr("needs 12"));
}

TEST(Safetensors, MalformedEntriesNameFileAndTensor) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  const std::vector<nlohmann::json> bad = {
      {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 4}}}}},   // begin after end
      {{"w", {{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 4}}}}},  // negative dimension
      {{"w", {{"dtype", "F32"}, {"shape", {1}}}}},                             // no offsets
      {{"w", {{"dtype", 3}, {"shape", {1}}, {"data_offsets", {0, 4}}}}},       // dtype not a string
  };
  for (const auto& h : bad) {
    test::write_raw(p, h.dump(), pattern(8, 1));
    std::string msg = error_of([&] { SafetensorsFile f(p); });
    EXPECT_THAT(msg, HasSubstr(p.string())) << h.dump();
    EXPECT_THAT(msg, HasSubstr("'w'")) << h.dump();
  }
}

}  // namespace
}  // namespace ds
