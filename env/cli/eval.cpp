// Offline evaluation: sample loading, in-process and server scorers, the run loop and resume.
#include "env/cli/eval.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "clients/cpp/client.hpp"
#include "core/checksum.hpp"
#include "core/msgpack_codec.hpp"
#include "core/protocol.hpp"
#include "core/step_status.hpp"
#include "core/text_file.hpp"
#include "env/cli/report.hpp"

namespace crucible::env {
namespace {

using core::ErrorCode;
using core::Value;
using Clock = std::chrono::steady_clock;

// A JSON type as a JSON user names it: "object", "array", "string", "number", ...
std::string json_type_name(const Value& value) {
  if (value.is_object()) return "object";
  if (value.is_array()) return "array";
  if (value.is_string()) return "string";
  if (value.is_number()) return "number";
  if (value.is_boolean()) return "boolean";
  if (value.is_null()) return "null";
  return "binary";
}

std::string with_article(const std::string& noun) {
  return (noun.find_first_of("aeiou") == 0 ? "an " : "a ") + noun;
}

std::string wrong_type(const std::string& field, const std::string& want, const Value& got) {
  return "field '" + field + "' must be " + want + ", got " + json_type_name(got);
}

// The text of the current errno, for messages about a failed read or write.
std::string errno_text(int error) {
  return error != 0 ? std::strerror(error) : "the write did not complete";
}

core::Result<std::vector<Sample>> load_folder(const std::filesystem::path& root,
                                              const tasks::Registry& registry,
                                              std::vector<std::string>* skipped) {
  std::vector<Sample> samples;
  std::error_code error;
  std::filesystem::recursive_directory_iterator it(root, error), end;
  if (error) return core::Error{ErrorCode::kIo, "cannot list " + root.string()};
  for (; it != end; it.increment(error)) {
    if (error) return core::Error{ErrorCode::kIo, "cannot list " + root.string()};
    if (!it->is_regular_file() || it->path().extension() != ".cu") continue;
    auto relative = std::filesystem::relative(it->path(), root).replace_extension("");
    const std::string id = relative.generic_string();
    const std::string parent = relative.parent_path().generic_string();
    std::string task;
    if (registry.find(id) != nullptr) {
      task = id;
    } else if (!parent.empty() && registry.find(parent) != nullptr) {
      task = parent;
    } else {
      if (skipped != nullptr) skipped->push_back(it->path().string());
      continue;
    }
    auto source = core::read_text_file(it->path());
    if (!source) return source.error();
    Sample sample;
    sample.sample_id = id;
    sample.task = task;
    sample.source = std::move(source).value();
    samples.push_back(std::move(sample));
  }
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) { return a.sample_id < b.sample_id; });
  return samples;
}

core::Result<std::vector<Sample>> load_jsonl(const std::filesystem::path& path, SourceBlock which) {
  std::ifstream file(path);
  if (!file) return core::Error{ErrorCode::kIo, "cannot read " + path.string()};
  std::vector<Sample> samples;
  std::set<std::string> ids;
  std::string line;
  std::size_t number = 0;
  while (std::getline(file, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(number);
    auto parsed = parse_json(line);
    if (!parsed) {
      const bool deep = parsed.error().code == ErrorCode::kTooLarge;
      return core::Error{
          ErrorCode::kInvalidArgument,
          where + (deep ? ": " + parsed.error().message : ": not a JSON object: not valid JSON")};
    }
    Value record = std::move(parsed).value();
    if (!record.is_object()) {
      return core::Error{ErrorCode::kInvalidArgument,
                         where + ": not a JSON object but " + with_article(json_type_name(record))};
    }
    const bool has_source = record.contains("source");
    const bool has_completion = record.contains("completion");
    if (!record.contains("task") || !record["task"].is_string() || has_source == has_completion ||
        (has_source && !record["source"].is_string())) {
      return core::Error{ErrorCode::kInvalidArgument,
                         where + (has_source && has_completion
                                      ? ": a record gives `source` or `completion`, not both"
                                      : ": a record needs a string field `task` and either a "
                                        "string `source` or a `completion`")};
    }
    Sample sample;
    sample.task = record["task"].get<std::string>();
    if (has_source) {
      sample.source = record["source"].get<std::string>();
    } else {
      auto text = completion_text(record["completion"]);
      if (!text) {
        return core::Error{ErrorCode::kInvalidArgument,
                           where + ": `completion`: " + text.error().message};
      }
      sample.from_completion = true;
      auto source = extract_source(*text, which);
      if (source) {
        sample.source = std::move(source).value();
      } else {
        sample.no_source = "no CUDA source in the completion: " + source.error().message;
      }
    }
    if (record.contains("sample_id")) {
      const auto& id = record["sample_id"];
      if (id.is_string()) {
        sample.sample_id = id.get<std::string>();
      } else if (id.is_number_integer()) {
        sample.sample_id = id.dump();
      } else {
        return core::Error{ErrorCode::kInvalidArgument,
                           where + ": `sample_id` must be a string or an integer"};
      }
    } else {
      sample.sample_id = sample.task + "#" + std::to_string(number);
    }
    if (record.contains("meta")) sample.meta = record["meta"];
    if (!ids.insert(sample.sample_id).second) {
      return core::Error{ErrorCode::kInvalidArgument,
                         where + ": sample_id '" + sample.sample_id + "' is used twice"};
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

// A step result made here rather than by a pipeline (a failed request, a completion with no
// source), so that it is recorded like any other sample.
StepResult unscored_result(core::StepStatus status, const std::string& message,
                           const rewards::RewardSpec& spec) {
  StepResult result;
  result.status = status;
  result.message = message;
  result.reward = rewards::compute_reward(spec, {result.status, {}});
  return result;
}

Value infra_result(const std::string& message) {
  return unscored_result(core::StepStatus::kInfraError, message, rewards::default_reward_spec())
      .to_value();
}

class PipelineScorer final : public Scorer {
 public:
  PipelineScorer(const Pipeline& pipeline, rewards::RewardSpec spec, std::uint64_t seed,
                 EvalModel model)
      : pipeline_(pipeline), spec_(std::move(spec)), seed_(seed), model_(std::move(model)) {}

  Value score(const Sample& sample, const tasks::Task& task, std::size_t) override {
    const auto start = Clock::now();
    StepJob job{&task, sample.source, nullptr, seed_, spec_, nullptr, model_.for_task(task)};
    StepResult result = pipeline_.run(job);
    const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    return make_result_record(sample, task, result.to_value(), result.reward.total, seed_, where(),
                              wall_ms);
  }
  std::string where() const override { return "in-process"; }

 private:
  const Pipeline& pipeline_;
  rewards::RewardSpec spec_;
  std::uint64_t seed_;
  EvalModel model_;
};

class ServerScorer final : public Scorer {
 public:
  ServerScorer(std::string endpoint, std::size_t workers, Value reward_spec, std::uint64_t seed,
               std::chrono::milliseconds timeout, EvalModel model)
      : endpoint_(std::move(endpoint)),
        reward_spec_(std::move(reward_spec)),
        seed_(seed),
        timeout_(timeout),
        model_(std::move(model)),
        clients_(workers) {}

  core::Status connect() {
    for (auto& client : clients_) {
      clients::ClientOptions options;
      options.endpoint = endpoint_;
      options.timeout = timeout_;
      auto connected = clients::Client::connect(options);
      if (!connected) return connected.error();
      client = std::make_unique<clients::Client>(std::move(connected).value());
    }
    return {};
  }

  Value score(const Sample& sample, const tasks::Task& task, std::size_t worker) override {
    const auto start = Clock::now();
    Value fields{{"task", sample.task}, {"source", sample.source}, {"seed", seed_}};
    if (!reward_spec_.is_null()) fields["reward"] = reward_spec_;
    if (model_.for_task(task)) fields["model"] = model_.field;
    // Each worker owns one client (a client is single-threaded); any failure becomes an
    // infra_error result: the sample was not judged.
    auto reply = clients_.at(worker)->call(core::Op::kScore, std::move(fields));
    const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!reply) {
      return make_result_record(
          sample, task,
          infra_result(std::string(core::error_code_name(reply.error().code)) + ": " +
                       reply.error().message),
          0.0, seed_, where(), wall_ms);
    }
    Value result = reply->contains("result") ? (*reply)["result"] : infra_result("no result");
    const double reward = reply->value("reward", 0.0);
    return make_result_record(sample, task, result, reward, seed_, where(), wall_ms);
  }
  std::string where() const override { return endpoint_; }

 private:
  std::string endpoint_;
  Value reward_spec_;
  std::uint64_t seed_;
  std::chrono::milliseconds timeout_;
  EvalModel model_;
  std::vector<std::unique_ptr<clients::Client>> clients_;
};

core::Status write_file(const std::filesystem::path& path, const std::string& text) {
  const auto temporary = path.string() + ".tmp";
  {
    errno = 0;
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    int error = errno;
    if (file) {
      file << text;
      error = errno;
      if (file) {
        // The bytes may still sit in the stream's buffer: only a close that succeeds says
        // they were written (a full disk often shows up here, not at the `<<`).
        file.close();
        error = errno;
      }
    }
    if (file.fail()) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      return core::Error{ErrorCode::kIo, "cannot write " + path.string() + " (through " +
                                             temporary + "): " + errno_text(error)};
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    return core::Error{ErrorCode::kIo, "cannot write " + path.string() + ": " + error.message()};
  }
  return {};
}

// Appends whole lines with one write(2) each, so a line is either in the file or not.
class LineAppender {
 public:
  static core::Result<std::unique_ptr<LineAppender>> open(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      return core::Error{ErrorCode::kIo, "cannot open " + path.string() + ": " + errno_text(errno)};
    }
    return std::unique_ptr<LineAppender>(new LineAppender(fd, path));
  }
  ~LineAppender() { ::close(fd_); }
  core::Status append(const std::string& line) {
    std::lock_guard lock(mutex_);
    const std::string text = line + "\n";
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return core::Error{ErrorCode::kIo,
                           "cannot append to " + path_.string() + ": " + errno_text(errno)};
      }
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

 private:
  LineAppender(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::filesystem::path path_;
  std::mutex mutex_;
};

}  // namespace

core::Result<std::vector<Sample>> load_samples(const std::filesystem::path& input,
                                               const tasks::Registry& registry,
                                               std::vector<std::string>* skipped,
                                               SourceBlock which) {
  std::error_code error;
  if (std::filesystem::is_directory(input, error)) return load_folder(input, registry, skipped);
  if (!std::filesystem::exists(input, error)) {
    return core::Error{ErrorCode::kIo, input.string() + " does not exist"};
  }
  if (!std::filesystem::is_regular_file(input, error)) {
    // A FIFO would block until a writer comes, a device may never end.
    return core::Error{ErrorCode::kIo, input.string() +
                                           " is not a regular file or a folder (a FIFO, a "
                                           "device, a socket?): give a JSONL file or a folder"};
  }
  return load_jsonl(input, which);
}

core::Result<std::vector<Sample>> select_samples(std::vector<Sample> samples,
                                                 const std::vector<std::string>& selection,
                                                 const tasks::Registry& registry) {
  std::set<std::string> categories;
  for (const auto& task : registry.all()) categories.insert(task.category);
  bool all = selection.empty();
  for (const auto& selector : selection) {
    if (selector == "all") {
      all = true;
    } else if (registry.find(selector) == nullptr && categories.count(selector) == 0) {
      return core::Error{ErrorCode::kInvalidArgument,
                         "'" + selector + "' is neither a task id nor a category; " +
                             "`crucible tasks list` shows them"};
    }
  }
  std::vector<Sample> kept;
  for (auto& sample : samples) {
    const auto* task = registry.find(sample.task);
    if (task == nullptr) {
      return core::Error{ErrorCode::kUnknownTask, "sample '" + sample.sample_id +
                                                      "' names unknown task '" + sample.task + "'"};
    }
    const bool chosen =
        all || std::any_of(selection.begin(), selection.end(), [&](const std::string& s) {
          return s == task->id || s == task->category;
        });
    if (chosen) kept.push_back(std::move(sample));
  }
  return kept;
}

std::optional<ModelRequest> EvalModel::for_task(const tasks::Task& task) const {
  if (!catalog) return std::nullopt;
  auto resolved = catalog->resolve(field, task);
  if (!resolved) return std::nullopt;
  return std::move(resolved).value();
}

std::unique_ptr<Scorer> make_pipeline_scorer(const Pipeline& pipeline,
                                             rewards::RewardSpec reward_spec, std::uint64_t seed,
                                             EvalModel model) {
  return std::make_unique<PipelineScorer>(pipeline, std::move(reward_spec), seed, std::move(model));
}

core::Result<std::unique_ptr<Scorer>> make_server_scorer(
    const std::string& endpoint, std::size_t workers, core::Value reward_spec, std::uint64_t seed,
    std::chrono::milliseconds timeout, EvalModel model) {
  auto scorer =
      std::make_unique<ServerScorer>(endpoint, std::max<std::size_t>(workers, 1),
                                     std::move(reward_spec), seed, timeout, std::move(model));
  if (auto connected = scorer->connect(); !connected) return connected.error();
  return std::unique_ptr<Scorer>(std::move(scorer));
}

core::Value make_result_record(const Sample& sample, const tasks::Task& task,
                               const core::Value& step_result, double reward, std::uint64_t seed,
                               const std::string& scored_by, double wall_ms) {
  Value record{{"sample_id", sample.sample_id},
               {"task", task.id},
               {"category", task.category},
               {"status", step_result.value("status", "infra_error")},
               {"message", step_result.value("message", "")},
               {"reward", reward},
               {"seed", seed},
               {"source_sha256", core::sha256_hex(sample.source)},
               {"source_bytes", sample.source.size()},
               {"source_from", sample.from_completion ? "completion" : "source"},
               {"meta", sample.meta},
               {"scored_by", scored_by},
               {"time", core::utc_time_text()},
               {"wall_ms", wall_ms}};
  if (step_result.contains("speedup") && step_result["speedup"].is_number()) {
    record["speedup"] = step_result["speedup"];
  }
  if (step_result.contains("timing") && step_result["timing"].is_object() &&
      step_result["timing"].contains("speedup_ci95")) {
    record["speedup_ci95"] = step_result["timing"]["speedup_ci95"];
  }
  // The model check's report, whole (docs/models.md): the report's end-to-end column.
  if (step_result.contains("model") && step_result["model"].is_object()) {
    record["model"] = step_result["model"];
  }
  if (step_result.contains("correctness") && step_result["correctness"].is_object() &&
      step_result["correctness"].value("caught_in_timed_call", false)) {
    record["caught_in_timed_call"] = true;
  }
  if (step_result.contains("reward") && step_result["reward"].is_object()) {
    record["reward_terms"] = step_result["reward"].value("terms", Value::object());
    record["infra"] = step_result["reward"].value("infra", false);
  }
  record["result"] = step_result;
  return record;
}

struct Progress::State {
  std::string label;
  std::size_t total = 0;
  std::size_t done = 0;
  bool terminal = false;
  bool finished = false;
  Clock::time_point start = Clock::now();
  Clock::time_point last_line = Clock::now();
  std::size_t last_line_done = 0;
  std::map<std::string, std::size_t> statuses;
  std::mutex mutex;
};

namespace {

std::string format_seconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  } else {
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  }
  return text;
}

}  // namespace

Progress::Progress(std::string label, std::size_t total, bool terminal)
    : state_(std::make_unique<State>()) {
  state_->label = std::move(label);
  state_->total = total;
  state_->terminal = terminal;
}

Progress::~Progress() { finish(); }

void Progress::advance(const std::string& status) {
  std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  ++s.done;
  ++s.statuses[status];
  const double elapsed = std::chrono::duration<double>(Clock::now() - s.start).count();
  const double rate = elapsed > 0 ? static_cast<double>(s.done) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(s.total - s.done) / rate : -1.0;
  std::string counts;
  for (const auto& [name, count] : s.statuses) {
    counts += (counts.empty() ? "" : " ") + name + "=" + std::to_string(count);
  }
  if (s.terminal) {
    constexpr int kWidth = 30;
    const int filled = s.total == 0 ? kWidth : static_cast<int>(kWidth * s.done / s.total);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    char rate_text[32];
    std::snprintf(rate_text, sizeof rate_text, "%.2f/s", rate);
    std::cerr << "\r\033[K" << s.label << " [" << bar << "] " << s.done << "/" << s.total << " "
              << rate_text << " ETA " << format_seconds(eta) << "  " << counts << std::flush;
    return;
  }
  const std::size_t step = std::max<std::size_t>(1, s.total / 20);
  const bool due = s.done == s.total || (s.done - s.last_line_done >= step &&
                                         Clock::now() - s.last_line >= std::chrono::seconds(2));
  if (!due) return;
  s.last_line = Clock::now();
  s.last_line_done = s.done;
  std::cerr << s.label << ": " << s.done << "/" << s.total << " scored, elapsed "
            << format_seconds(elapsed) << ", ETA " << format_seconds(eta) << " (" << counts
            << ")\n";
}

void Progress::finish() {
  if (!state_) return;
  std::lock_guard lock(state_->mutex);
  if (state_->finished) return;
  state_->finished = true;
  if (state_->terminal && state_->done > 0) std::cerr << "\n";
}

namespace {

// Why a results.jsonl record cannot be used, or "" when it can.
std::string check_result_record(const Value& record) {
  if (!record.is_object()) return "not a JSON object but " + with_article(json_type_name(record));
  for (const char* key : {"sample_id", "status"}) {
    const auto it = record.find(key);
    if (it == record.end()) return std::string("missing field '") + key + "'";
    if (!it->is_string()) return wrong_type(key, "a string", *it);
  }
  for (const char* key : {"task", "category", "message"}) {
    const auto it = record.find(key);
    if (it != record.end() && !it->is_string()) return wrong_type(key, "a string", *it);
  }
  const auto speedup = record.find("speedup");
  if (speedup != record.end() && !speedup->is_null() && !speedup->is_number()) {
    return wrong_type("speedup", "a number", *speedup);
  }
  return {};
}

}  // namespace

core::Result<std::vector<core::Value>> read_results(const std::filesystem::path& path,
                                                    std::size_t* torn_lines) {
  std::vector<Value> records;
  if (torn_lines != nullptr) *torn_lines = 0;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return records;
  if (!std::filesystem::is_regular_file(path, error)) {
    return core::Error{ErrorCode::kIo, path.string() + " is not a regular file"};
  }
  auto text = core::read_text_file(path);
  if (!text) return text.error();
  std::size_t number = 0;
  std::size_t at = 0;
  while (at < text->size()) {
    const auto newline = text->find('\n', at);
    const bool last = newline == std::string::npos;
    const std::string_view line =
        std::string_view(*text).substr(at, last ? std::string::npos : newline - at);
    at = last ? text->size() : newline + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(number) + ": ";
    auto record = parse_json(line);
    if (!record) {
      // Each record is appended with one write(2) ending in its newline, so a kill can only
      // leave a last line with no newline; any other line that does not parse is damage.
      if (last && record.error().code == ErrorCode::kInvalidArgument) {
        if (torn_lines != nullptr) ++*torn_lines;
        continue;
      }
      const bool deep = record.error().code == ErrorCode::kTooLarge;
      return core::Error{ErrorCode::kInvalidArgument,
                         where + record.error().message +
                             (deep ? std::string()
                                   : " (only the last line can be cut short by an "
                                     "interruption)")};
    }
    if (const std::string why = check_result_record(*record); !why.empty()) {
      return core::Error{ErrorCode::kInvalidArgument, where + why};
    }
    records.push_back(std::move(record).value());
  }
  return records;
}

core::Result<core::Value> parse_json(std::string_view text, std::size_t max_depth) {
  // nlohmann's parser keeps its own stack, but copying, printing and comparing a Value recurse
  // once per level: count the nesting first, outside strings.
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return core::Error{ErrorCode::kTooLarge,
                           "nested deeper than " + std::to_string(max_depth) + " levels"};
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  Value value = Value::parse(text, nullptr, false);
  if (value.is_discarded()) return core::Error{ErrorCode::kInvalidArgument, "not JSON"};
  return value;
}

core::Result<EvalOutcome> run_eval(const std::vector<Sample>& samples,
                                   const tasks::Registry& registry, Scorer& scorer,
                                   const EvalOptions& options, core::Value run_info) {
  std::error_code error;
  std::filesystem::create_directories(options.out_dir, error);
  if (error) return core::Error{ErrorCode::kIo, "cannot create " + options.out_dir.string()};
  const auto results_path = options.out_dir / "results.jsonl";

  EvalOutcome outcome;
  std::size_t torn = 0;
  auto existing = read_results(results_path, &torn);
  if (!existing) return existing.error();
  if (!options.resume && (!existing->empty() || torn > 0)) {
    return core::Error{ErrorCode::kInvalidArgument,
                       results_path.string() + " already holds " +
                           std::to_string(existing->size()) +
                           " results: pass --resume to continue that run, or choose another "
                           "output folder"};
  }
  std::set<std::string> done;
  for (const auto& record : *existing) done.insert(record["sample_id"].get<std::string>());
  if (torn > 0) {
    // Drop the torn line(s) of an interrupted run so the file is whole JSON lines again.
    std::string text;
    for (const auto& record : *existing) text += core::to_json_text(record) + "\n";
    if (auto written = write_file(results_path, text); !written) return written.error();
  }

  std::vector<const Sample*> todo;
  for (const auto& sample : samples) {
    if (done.count(sample.sample_id) > 0) {
      ++outcome.already_done;
    } else {
      todo.push_back(&sample);
    }
  }

  auto appender = LineAppender::open(results_path);
  if (!appender) return appender.error();

  std::optional<Progress> progress;
  if (!options.quiet) progress.emplace("eval", todo.size(), options.progress_terminal);
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> scored{0};
  std::mutex error_mutex;
  std::optional<core::Error> io_error;
  auto worker = [&](std::size_t index) {
    while (true) {
      if (options.stop != nullptr && options.stop->load()) return;
      {
        std::lock_guard lock(error_mutex);
        if (io_error) return;
      }
      const std::size_t i = next.fetch_add(1);
      if (i >= todo.size()) return;
      const Sample& sample = *todo[i];
      const tasks::Task* task = registry.find(sample.task);
      Value record;
      if (task == nullptr) {
        record = Value{{"sample_id", sample.sample_id}, {"status", "infra_error"}};
      } else if (!sample.no_source.empty()) {
        const StepResult refused = unscored_result(core::StepStatus::kInvalidAction,
                                                   sample.no_source, options.reward_spec);
        record = make_result_record(sample, *task, refused.to_value(), refused.reward.total,
                                    options.seed, scorer.where(), 0.0);
      } else {
        record = scorer.score(sample, *task, index);
      }
      if (auto appended = (*appender)->append(core::to_json_text(record)); !appended) {
        std::lock_guard lock(error_mutex);
        io_error = appended.error();
        return;
      }
      ++scored;
      if (progress) progress->advance(record.value("status", "?"));
    }
  };
  const std::size_t workers = std::clamp<std::size_t>(options.workers, 1, 256);
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < std::min(workers, std::max<std::size_t>(todo.size(), 1)); ++w) {
    threads.emplace_back(worker, w);
  }
  for (auto& thread : threads) thread.join();
  if (progress) progress->finish();
  if (io_error) return *io_error;

  outcome.scored = scored.load();
  outcome.remaining = todo.size() - outcome.scored;
  outcome.interrupted = outcome.remaining > 0;

  auto all = read_results(results_path);
  if (!all) return all.error();
  // Records of samples outside this run's selection (an earlier run with a wider one) stay in
  // results.jsonl but are left out of the summary.
  std::set<std::string> wanted;
  for (const auto& sample : samples) wanted.insert(sample.sample_id);
  std::vector<Value> records;
  for (auto& record : *all) {
    if (wanted.count(record["sample_id"].get<std::string>()) > 0) records.push_back(record);
  }
  run_info["samples_selected"] = samples.size();
  run_info["samples_recorded"] = records.size();
  run_info["interrupted"] = outcome.interrupted;
  run_info["scored_by"] = scorer.where();
  run_info["finished"] = core::utc_time_text();
  outcome.summary = summarize(records, run_info);
  if (auto w = write_file(options.out_dir / "summary.json",
                          core::to_json_text(outcome.summary, 2) + "\n");
      !w) {
    return w.error();
  }
  if (auto w = write_file(options.out_dir / "report.md", render_markdown(outcome.summary)); !w) {
    return w.error();
  }
  if (auto w = write_file(options.out_dir / "report.html", render_html(outcome.summary)); !w) {
    return w.error();
  }
  return outcome;
}

}  // namespace crucible::env
