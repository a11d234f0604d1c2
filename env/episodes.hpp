// Episode bookkeeping of the server: the table of open episodes, their step budgets, the best
// reward of each, the bytes they hold against the server's cap, and expiry of idle episodes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>

#include "core/result.hpp"
#include "core/value.hpp"
#include "env/model_option.hpp"
#include "env/step_result.hpp"
#include "rewards/reward.hpp"
#include "tasks/task.hpp"

namespace crucible::env {

// An episode's step budget counts the steps that ran on the agent's account: a step answered
// infra_error (the server's fault) or one that could not be logged gives its place back and
// never becomes the best.
struct Episode {
  std::string id;
  const tasks::Task* task = nullptr;
  std::uint64_t seed = 0;
  std::uint32_t max_steps = 0;
  rewards::RewardSpec reward_spec;
  core::Value reward_spec_value;
  core::Value options;
  core::Value tag;  // the reset's request tag (null if none): its steps carry it
  bool stop_on_ok = false;
  std::optional<ModelRequest> model;  // the reset's model check: every ok step gets one
  std::uint32_t steps_numbered = 0;   // step numbers handed out (every accepted step)
  std::uint32_t steps_charged = 0;    // budget in use: steps running plus steps counted
  std::uint32_t steps_counted = 0;    // steps finished, logged and not infra_error
  std::uint32_t steps_running = 0;
  bool finished = false;            // terminated by stop_on_ok
  core::Value best = nullptr;       // {step, reward, status, speedup?}
  std::optional<double> best_base;  // best unshaped reward so far (multi-turn shaping)
  std::size_t footprint_bytes = 0;  // what the episode holds, counted against the server's cap
  std::chrono::steady_clock::time_point last_active;
};

// A step taken on an episode's budget: the episode and the step's number in it (1-based).
struct EpisodeStep {
  std::shared_ptr<Episode> episode;
  std::uint32_t step = 0;
};

// What a finished step leaves of its episode, for the reply.
struct StepEnd {
  bool terminated = false;  // stop_on_ok and the step was ok
  bool truncated = false;   // the budget is used up without termination
  core::Value best;         // the episode's best step so far
};

// An episode as close reports it.
struct ClosedEpisode {
  std::string id;
  std::uint32_t steps = 0;  // steps counted
  core::Value best;
};

// The open episodes. Episodes are opened, stepped, closed and expired by the server's loop
// thread; worker threads settle the steps they ran. Every method is thread-safe (one mutex).
class Episodes {
 public:
  Episodes(std::size_t max_episodes, std::size_t max_bytes, std::chrono::seconds idle_timeout);

  // Adds `episode` (filled in by the caller but for its id and footprint) under a fresh id
  // "ep-<16 hex digits>" drawn from `rng`. kBusy when max_episodes are open or the episode's
  // footprint would take the open episodes past max_bytes.
  core::Status open(const std::shared_ptr<Episode>& episode, std::mt19937_64& rng);

  // Takes one step of episode `id` on its budget: numbers it, charges it and marks it running.
  // kUnknownEpisode when no such episode is open; kEpisodeDone when it has terminated or its
  // budget is in use.
  core::Result<EpisodeStep> begin_step(const std::string& id);
  // A step begun but never run (the work queue was full): gives back its number and budget.
  void cancel_step(Episode& episode);
  // The reward of a step after multi-turn shaping against the episode's best unshaped reward
  // (rewards::shape_for_episode).
  rewards::RewardBreakdown shape_reward(const Episode& episode, const rewards::RewardSpec& spec,
                                        const rewards::RewardBreakdown& reward) const;
  // A step that ran but could not be logged: it gives its place in the budget back.
  void step_not_logged(Episode& episode);
  // A step that ran and was logged, `base` its unshaped reward: counts it (or, for infra_error,
  // gives its place back), updates the best step and ends the episode on stop_on_ok.
  StepEnd finish_step(Episode& episode, std::uint32_t step, const StepResult& result, double base,
                      bool improvement);

  // Removes episode `id`. kUnknownEpisode when no such episode is open.
  core::Result<ClosedEpisode> close(const std::string& id);
  // Removes the episodes idle for longer than the idle timeout with no step running.
  void expire();

  struct Usage {
    std::size_t open = 0;   // episodes open
    std::size_t bytes = 0;  // the sum of their footprints
  };
  Usage usage() const;

 private:
  std::size_t max_episodes_;
  std::size_t max_bytes_;
  std::chrono::seconds idle_timeout_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Episode>> episodes_;
  std::size_t bytes_ = 0;  // sum of the open episodes' footprints
};

}  // namespace crucible::env
