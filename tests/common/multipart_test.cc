#include "common/multipart.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace atrium {
namespace {

const std::string kBody = std::string(
                              "preamble to ignore\r\n"
                              "--XyZ\r\n"
                              "Content-Disposition: form-data; name=\"model\"\r\n"
                              "\r\n"
                              "whisper-1\r\n"
                              "--XyZ\r\n"
                              "content-disposition: form-data; name=\"file\"; "
                              "filename=\"a \\\"b\\\".wav\"\r\n"
                              "Content-Type: audio/wav\r\n"
                              "\r\n") +
                          std::string("RIFF\r\n\0data", 11) +
                          "--XyZ-not-a-boundary\r\n"
                          "--XyZ--\r\n"
                          "epilogue";

TEST(MultipartTest, BoundaryFromTheContentType) {
  EXPECT_EQ(*FormBoundary("multipart/form-data; boundary=XyZ"), "XyZ");
  EXPECT_EQ(*FormBoundary("Multipart/Form-Data; charset=utf-8; boundary=\"a b;c\""), "a b;c");
  for (const char* bad : {"application/json", "multipart/form-data",
                          "multipart/form-data; boundary=", "multipart/mixed; boundary=x"}) {
    EXPECT_FALSE(FormBoundary(bad).has_value()) << bad;
  }
  EXPECT_FALSE(FormBoundary("multipart/form-data; boundary=" + std::string(71, 'a')).has_value());
}

TEST(MultipartTest, PartsWithNamesFilenamesAndBinaryData) {
  auto parts = ParseForm(kBody, "XyZ");
  ASSERT_TRUE(parts.has_value()) << parts.error().message;
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "model");
  EXPECT_EQ((*parts)[0].data, "whisper-1");
  EXPECT_EQ((*parts)[1].name, "file");
  EXPECT_EQ((*parts)[1].filename, "a \"b\".wav");
  EXPECT_EQ((*parts)[1].content_type, "audio/wav");
  EXPECT_EQ((*parts)[1].data, std::string_view("RIFF\r\n\0data--XyZ-not-a-boundary", 31));
}

TEST(MultipartTest, MalformedBodiesAreRefusedNotGuessed) {
  const std::string part = "Content-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n";
  for (const std::string& bad : std::vector<std::string>{
           std::string("no boundary at all"),
           "--XyZ\r\n" + part,                                             // never closed
           "--XyZ\r\nContent-Disposition: form-data\r\n\r\nx\r\n--XyZ--",  // no name
           "--XyZ\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--XyZ--",
           "--XyZ\r\nBroken header\r\n\r\nx\r\n--XyZ--",
           "--XyZ" + part,  // no CRLF after the boundary
           "--XyZ\r\n" + std::string(kMaxPartHeaderBytes + 10, 'h') + "\r\n\r\nx\r\n--XyZ--",
       }) {
    auto parts = ParseForm(bad, "XyZ");
    EXPECT_FALSE(parts.has_value()) << bad.substr(0, 80);
    if (!parts.has_value()) {
      EXPECT_EQ(parts.error().code, ErrorCode::kInvalidArgument);
    }
  }
  std::string many;
  for (size_t i = 0; i <= kMaxParts; ++i) many += "--XyZ\r\n" + part;
  many += "--XyZ--";
  EXPECT_FALSE(ParseForm(many, "XyZ").has_value());
  EXPECT_TRUE(ParseForm("--XyZ--", "XyZ").has_value());  // no parts: the caller decides
}

}  // namespace
}  // namespace atrium
