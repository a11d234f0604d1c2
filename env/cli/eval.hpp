// Offline evaluation: load solutions, score each (in-process or through a server), keep results.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"
#include "env/cli/completion.hpp"
#include "env/pipeline.hpp"
#include "rewards/reward.hpp"
#include "tasks/registry.hpp"

namespace crucible::env {

// One solution to score.
struct Sample {
  std::string sample_id;         // unique within a run; resume keys on it
  std::string task;              // task id, e.g. "llm/rms_norm"
  std::string source;            // CUDA source, as an agent would send it
  core::Value meta = nullptr;    // carried into the result record untouched
  bool from_completion = false;  // `source` was extracted from an LLM completion
  // Why a completion yielded no source ("" when it did). Such a sample is never sent to a
  // scorer: run_eval records it as invalid_action with this reason.
  std::string no_source;
};

// Loads samples from `input`:
//  - a folder: every `*.cu` below it. `<dir>/llm/rms_norm.cu` is a sample of task llm/rms_norm
//    (sample id "llm/rms_norm"); `<dir>/llm/rms_norm/<name>.cu` is a further sample of the same
//    task (sample id "llm/rms_norm/<name>"). A file that names no task of `registry` is skipped
//    and listed in `skipped`.
//  - a file: JSON lines of {task, source | completion, sample_id?, meta?}; blank lines are
//    ignored; a missing sample_id becomes "<task>#<line number>". A `completion` (a string, a
//    chat message or a list of messages) gives its source through extract_source with `which`;
//    one that holds no source becomes a sample with `no_source` set, never a skipped line.
// Samples come back sorted by sample id (folders) or in file order (JSONL). Any bad line fails
// the whole load, before anything is scored. Errors: kIo (cannot read; `input` is neither a
// folder nor a regular file, e.g. a FIFO), kInvalidArgument (a malformed line, a line nested
// deeper than kMaxJsonDepth, a duplicate sample id, both or neither of `source` and
// `completion`, a completion of the wrong type; the message names the file and line).
core::Result<std::vector<Sample>> load_samples(const std::filesystem::path& input,
                                               const tasks::Registry& registry,
                                               std::vector<std::string>* skipped = nullptr,
                                               SourceBlock which = SourceBlock::kLast);

// Keeps the samples whose task matches `selection`: "all", a category ("llm") or a task id
// ("llm/rms_norm"). An empty selection means all. Errors: kInvalidArgument for a selector that
// names neither a task nor a category of `registry`; kUnknownTask for a sample whose task is
// not in the registry (JSONL input).
core::Result<std::vector<Sample>> select_samples(std::vector<Sample> samples,
                                                 const std::vector<std::string>& selection,
                                                 const tasks::Registry& registry);

// Scores one sample and returns its result record (see make_result_record). Implementations
// are called from `workers` threads at once, each passing its own worker index.
class Scorer {
 public:
  virtual ~Scorer() = default;
  virtual core::Value score(const Sample& sample, const tasks::Task& task, std::size_t worker) = 0;
  // "in-process" or the server endpoint; written into every record.
  virtual std::string where() const = 0;
};

// `eval --model`: the model check asked for every sample whose task the model calls (samples
// of other tasks are scored without one).
struct EvalModel {
  std::shared_ptr<ModelCatalog> catalog;  // null: no model check
  core::Value field;                      // as the `model` field of score: a name or a map
  // The resolved check for `task`, or nullopt when there is none or the model never calls it.
  std::optional<ModelRequest> for_task(const tasks::Task& task) const;
};

// Scores through a Pipeline in this process (Pipeline::run is thread-safe).
std::unique_ptr<Scorer> make_pipeline_scorer(const Pipeline& pipeline,
                                             rewards::RewardSpec reward_spec, std::uint64_t seed,
                                             EvalModel model = {});

// Scores through a running server's `score` op, one DEALER socket per worker, each request
// pipelined with the other workers'. Errors at connect time: kIo. A request that fails (timeout,
// server error) becomes a record with status infra_error and the reason as its message.
core::Result<std::unique_ptr<Scorer>> make_server_scorer(
    const std::string& endpoint, std::size_t workers, core::Value reward_spec, std::uint64_t seed,
    std::chrono::milliseconds timeout, EvalModel model = {});

// The result record of one sample (one line of results.jsonl):
// {sample_id, task, category, status, message, speedup?, speedup_ci95?, reward, reward_terms,
//  infra, seed, source_sha256, source_bytes, source_from ("source" or "completion"), meta,
//  scored_by, time, wall_ms, result: the full StepResult}.
core::Value make_result_record(const Sample& sample, const tasks::Task& task,
                               const core::Value& step_result, double reward, std::uint64_t seed,
                               const std::string& scored_by, double wall_ms);

// Shows progress on stderr: a redrawn bar with rate and ETA on a terminal, one plain line per
// ~5 % (at most one per 2 s) otherwise. Thread-safe.
class Progress {
 public:
  Progress(std::string label, std::size_t total, bool terminal);
  ~Progress();
  void advance(const std::string& status);
  void finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct EvalOptions {
  std::filesystem::path out_dir;
  std::size_t workers = 4;
  bool resume = false;
  // Set (e.g. from a SIGINT handler) to stop starting samples; in-flight ones finish and are
  // kept. Not owned; may be null.
  const std::atomic<bool>* stop = nullptr;
  bool progress_terminal = false;
  bool quiet = false;  // no progress output at all (tests)
  // The reward recorded for a sample whose completion held no source (status invalid_action),
  // which no scorer sees; the scorers apply the same spec to every other sample.
  rewards::RewardSpec reward_spec = rewards::default_reward_spec();
  std::uint64_t seed = 1;  // recorded for those samples, as the scorers record theirs
};

struct EvalOutcome {
  std::size_t already_done = 0;  // records found in results.jsonl by --resume
  std::size_t scored = 0;        // records added by this run
  std::size_t remaining = 0;     // samples not scored (stopped early)
  bool interrupted = false;
  core::Value summary;  // what summary.json holds
};

// Scores `samples` with `scorer`, appending one line per sample to out_dir/results.jsonl as it
// finishes (a single write, so an interrupted run keeps every finished record), then writes
// summary.json, report.md and report.html from every record in results.jsonl. A sample with
// `no_source` is recorded as invalid_action without a call to `scorer`. With `resume`,
// samples already in results.jsonl are skipped and a torn last line is dropped; without it, an
// existing non-empty results.jsonl is refused (kInvalidArgument) rather than mixed with a new
// run. Errors: kIo.
core::Result<EvalOutcome> run_eval(const std::vector<Sample>& samples,
                                   const tasks::Registry& registry, Scorer& scorer,
                                   const EvalOptions& options, core::Value run_info);

// Reads results.jsonl. Every record must be a JSON object with string fields `sample_id` and
// `status`; `task`, `category` and `message`, when present, are strings and `speedup` a number
// (or null). The one line an interrupted run can leave, a last line cut short (no newline, not
// JSON), is skipped and counted in `torn_lines`. Errors: kIo (cannot read, or not a regular
// file), kInvalidArgument for any other bad line: "PATH:LINE: field 'status' must be a string,
// got number" (a record of the wrong shape is not guessed at: resuming over it would mix a
// damaged run into the summary).
core::Result<std::vector<core::Value>> read_results(const std::filesystem::path& path,
                                                    std::size_t* torn_lines = nullptr);

// How deep JSON read by eval (input lines, results.jsonl, --reward) may nest. Deeper text is
// refused before it is parsed: a Value that deep overflows the stack when copied or printed.
inline constexpr std::size_t kMaxJsonDepth = 64;

// Parses one JSON document of at most `max_depth` nested arrays and objects. Errors:
// kTooLarge "nested deeper than 64 levels", kInvalidArgument "not JSON" (the caller adds where
// the text came from). Never throws.
core::Result<core::Value> parse_json(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

}  // namespace crucible::env
