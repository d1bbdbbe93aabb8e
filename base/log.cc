#include "base/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>

namespace ecstore {
namespace {

LogLevel Of(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
      return LogLevel::kTrace;
    case spdlog::level::debug:
      return LogLevel::kDebug;
    case spdlog::level::info:
      return LogLevel::kInfo;
    case spdlog::level::warn:
      return LogLevel::kWarn;
    default:
      return LogLevel::kError;
  }
}

spdlog::level::level_enum To(LogLevel l) {
  static constexpr spdlog::level::level_enum kLevels[] = {spdlog::level::trace,
                                                          spdlog::level::debug, spdlog::level::info,
                                                          spdlog::level::warn, spdlog::level::err};
  return kLevels[static_cast<int>(l)];
}

// One line per call, the message alone: the host adds its own time and prefix.
class CallbackSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CallbackSink(LogSink sink) : sink_(std::move(sink)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    sink_(Of(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  LogSink sink_;
};

}  // namespace

void SetLogSink(LogSink sink, LogLevel min) {
  std::shared_ptr<spdlog::logger> logger;
  if (sink) {
    logger = std::make_shared<spdlog::logger>("ecstore", std::make_shared<CallbackSink>(sink));
  } else {
    spdlog::drop("ecstore-stderr");
    logger = spdlog::stderr_color_mt("ecstore-stderr");
  }
  logger->set_level(To(min));
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace ecstore
