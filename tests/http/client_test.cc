#include "http/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "http/server.h"

namespace atrium::http {
namespace {

Response Echo(Request& request) {
  Response response;
  response.content_type = "text/plain";
  response.body = request.method + " " + request.target + " " + request.Header("host") + " " +
                  request.Header("user-agent") + " [" + request.Header("content-type") + "] " +
                  request.body;
  return response;
}

Result<int> StartOn(Server& server) { return server.Start(); }

TEST(ClientTest, RejectsHttpsAndMalformedUrls) {
  auto https = Client::Create("https://example.com");
  ASSERT_FALSE(https.has_value());
  EXPECT_EQ(https.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(https.error().message, "https is not supported yet");
  for (const char* url : {"", "example.com", "ftp://x", "http://", "http://:80", "http://h:0",
                          "http://h:99999", "http://h:8x", "http://[::1"}) {
    auto client = Client::Create(url);
    EXPECT_FALSE(client.has_value()) << url;
  }
  EXPECT_TRUE(Client::Create("http://localhost").has_value());
  EXPECT_TRUE(Client::Create("http://[::1]:8080/").has_value());
}

TEST(ClientTest, SendsDefaultHeadersAndReusesTheConnection) {
  ServerOptions options;
  options.max_connections = 1;  // a second connection would be closed at once
  Server server(options, Echo);
  auto port = StartOn(server);
  ASSERT_TRUE(port.has_value());
  const std::string authority = "127.0.0.1:" + std::to_string(*port);
  auto client = Client::Create("http://" + authority);
  ASSERT_TRUE(client.has_value());
  for (int i = 0; i < 3; ++i) {
    auto response = (*client)->Send("POST", "/p?i=" + std::to_string(i), "{}");
    ASSERT_TRUE(response.has_value()) << response.error().message;
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "POST /p?i=" + std::to_string(i) + " " + authority +
                                  " atrium-cli [application/json] {}");
  }
  auto get = (*client)->Send("GET", "/g", "", {{"User-Agent", "custom"}});
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->body, "GET /g " + authority + " custom [] ");
}

TEST(ClientTest, BasePathIsPrefixedToTargets) {
  Server server(ServerOptions{}, Echo);
  auto port = StartOn(server);
  ASSERT_TRUE(port.has_value());
  auto client = Client::Create("http://127.0.0.1:" + std::to_string(*port) + "/base/");
  ASSERT_TRUE(client.has_value());
  auto response = (*client)->Send("GET", "/x");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->body.substr(0, 12), "GET /base/x ");
}

TEST(ClientTest, ReconnectsWhenTheServerClosedTheIdleConnection) {
  auto first = std::make_unique<Server>(ServerOptions{}, Echo);
  auto port = StartOn(*first);
  ASSERT_TRUE(port.has_value());
  auto client = Client::Create("http://127.0.0.1:" + std::to_string(*port));
  ASSERT_TRUE(client.has_value());
  ASSERT_TRUE((*client)->Send("GET", "/before").has_value());
  first.reset();  // closes the client's idle keep-alive connection

  ServerOptions options;
  options.port = *port;
  Server second(options, Echo);
  ASSERT_TRUE(StartOn(second).has_value());
  auto response = (*client)->Send("GET", "/after");
  ASSERT_TRUE(response.has_value()) << response.error().message;
  EXPECT_EQ(response->body.substr(0, 11), "GET /after ");
}

TEST(ClientTest, RefusedConnectionIsUnavailable) {
  int port = 0;
  {
    Server server(ServerOptions{}, Echo);
    auto started = StartOn(server);
    ASSERT_TRUE(started.has_value());
    port = *started;
  }
  auto client = Client::Create("http://127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(client.has_value());
  auto response = (*client)->Send("GET", "/");
  ASSERT_FALSE(response.has_value());
  EXPECT_EQ(response.error().code, ErrorCode::kUnavailable);
}

TEST(ClientTest, SlowServerTimesOut) {
  Server server(ServerOptions{}, [](Request& request) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the slow handler
    return Echo(request);
  });
  auto port = StartOn(server);
  ASSERT_TRUE(port.has_value());
  auto client = Client::Create("http://127.0.0.1:" + std::to_string(*port), /*timeout_ms=*/50);
  ASSERT_TRUE(client.has_value());
  auto response = (*client)->Send("GET", "/");
  ASSERT_FALSE(response.has_value());
  EXPECT_EQ(response.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(response.error().message.find("timed out"), std::string::npos)
      << response.error().message;
}

TEST(ClientTest, RejectsInjectedLineBreaks) {
  auto client = Client::Create("http://127.0.0.1:1");
  ASSERT_TRUE(client.has_value());
  EXPECT_FALSE((*client)->Send("GET", "/a b").has_value());
  EXPECT_FALSE((*client)->Send("GET", "no-slash").has_value());
  EXPECT_FALSE((*client)->Send("GET", "/", "", {{"X", "a\r\nY: b"}}).has_value());
}

}  // namespace
}  // namespace atrium::http
