// Episode bookkeeping of the server (episodes.hpp): ids, budgets, best steps, the byte cap and
// idle expiry, all under one mutex.
#include "env/episodes.hpp"

#include "core/msgpack_codec.hpp"
#include "core/text.hpp"

namespace crucible::env {

using core::ErrorCode;
using core::Value;
using Clock = std::chrono::steady_clock;

namespace {

// Rough bytes an episode holds: the struct, its id and the maps it keeps.
std::size_t episode_footprint(const Episode& episode) {
  return sizeof(Episode) + episode.id.size() + core::encode_msgpack(episode.options).size() * 3 +
         core::encode_msgpack(episode.reward_spec_value).size() * 3 +
         core::encode_msgpack(episode.tag).size() * 3 + 512;
}

std::string random_hex(std::mt19937_64& rng, int bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    const auto byte = static_cast<unsigned>(rng() & 0xFFu);
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xF]);
  }
  return out;
}

}  // namespace

Episodes::Episodes(std::size_t max_episodes, std::size_t max_bytes,
                   std::chrono::seconds idle_timeout)
    : max_episodes_(max_episodes), max_bytes_(max_bytes), idle_timeout_(idle_timeout) {}

core::Status Episodes::open(const std::shared_ptr<Episode>& episode, std::mt19937_64& rng) {
  std::lock_guard lock(mutex_);
  if (episodes_.size() >= max_episodes_) {
    return core::Error{ErrorCode::kBusy, "the server holds " + std::to_string(episodes_.size()) +
                                             " open episodes, its limit; close some first"};
  }
  do {
    episode->id = "ep-" + random_hex(rng, 8);
  } while (episodes_.count(episode->id) > 0);
  episode->footprint_bytes = episode_footprint(*episode);
  if (bytes_ + episode->footprint_bytes > max_bytes_) {
    return core::Error{ErrorCode::kBusy, "the open episodes hold " + std::to_string(bytes_) +
                                             " bytes and this one needs " +
                                             std::to_string(episode->footprint_bytes) +
                                             "; the server's limit is " +
                                             std::to_string(max_bytes_) + ": close some first"};
  }
  bytes_ += episode->footprint_bytes;
  episodes_[episode->id] = episode;
  return {};
}

core::Result<EpisodeStep> Episodes::begin_step(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = episodes_.find(id);
  if (it == episodes_.end()) {
    return core::Error{ErrorCode::kUnknownEpisode,
                       "unknown episode '" + core::excerpt(id, 64) +
                           "': it was never opened, was closed, or expired after " +
                           std::to_string(idle_timeout_.count()) + " s idle; call reset"};
  }
  Episode& episode = *it->second;
  if (episode.finished || episode.steps_charged >= episode.max_steps) {
    return core::Error{ErrorCode::kEpisodeDone, "episode '" + episode.id + "' is over (" +
                                                    std::to_string(episode.steps_charged) + " of " +
                                                    std::to_string(episode.max_steps) +
                                                    " steps used); call reset for a new one"};
  }
  const std::uint32_t step = ++episode.steps_numbered;
  ++episode.steps_charged;
  ++episode.steps_running;
  episode.last_active = Clock::now();
  return EpisodeStep{it->second, step};
}

void Episodes::cancel_step(Episode& episode) {
  std::lock_guard lock(mutex_);
  --episode.steps_charged;
  --episode.steps_running;
  --episode.steps_numbered;
}

rewards::RewardBreakdown Episodes::shape_reward(const Episode& episode,
                                                const rewards::RewardSpec& spec,
                                                const rewards::RewardBreakdown& reward) const {
  // Reward only what this step adds over the episode's best so far.
  std::lock_guard lock(mutex_);
  return rewards::shape_for_episode(spec, reward, episode.best_base);
}

void Episodes::step_not_logged(Episode& episode) {
  std::lock_guard lock(mutex_);
  --episode.steps_charged;
  --episode.steps_running;
  episode.last_active = Clock::now();
}

StepEnd Episodes::finish_step(Episode& episode, std::uint32_t step, const StepResult& result,
                              double base, bool improvement) {
  StepEnd end;
  std::lock_guard lock(mutex_);
  --episode.steps_running;
  episode.last_active = Clock::now();
  if (result.status == core::StepStatus::kInfraError) {
    // The server's fault: the step gives its place in the budget back.
    --episode.steps_charged;
  } else {
    ++episode.steps_counted;
    if (improvement && (!episode.best_base || base > *episode.best_base)) {
      episode.best_base = base;
    }
    // The best step is judged on the unshaped reward: with improvement shaping a later,
    // better kernel can earn less than the first one did.
    if (episode.best.is_null() || base > episode.best["base"].get<double>()) {
      episode.best = Value{{"step", step},
                           {"reward", result.reward.total},
                           {"base", base},
                           {"status", core::step_status_name(result.status)}};
      if (result.speedup) episode.best["speedup"] = *result.speedup;
    }
    if (episode.stop_on_ok && result.status == core::StepStatus::kOk) {
      episode.finished = true;
      end.terminated = true;
    }
  }
  end.truncated = !end.terminated && episode.steps_counted >= episode.max_steps;
  end.best = episode.best;
  return end;
}

core::Result<ClosedEpisode> Episodes::close(const std::string& id) {
  std::shared_ptr<Episode> episode;
  {
    std::lock_guard lock(mutex_);
    const auto it = episodes_.find(id);
    if (it == episodes_.end()) {
      return core::Error{ErrorCode::kUnknownEpisode,
                         "unknown episode '" + core::excerpt(id, 64) + "'"};
    }
    episode = it->second;
    bytes_ -= episode->footprint_bytes;
    episodes_.erase(it);
  }
  std::lock_guard lock(mutex_);
  return ClosedEpisode{episode->id, episode->steps_counted, episode->best};
}

void Episodes::expire() {
  const auto cutoff = Clock::now() - idle_timeout_;
  std::lock_guard lock(mutex_);
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    const bool busy = it->second->steps_running > 0;
    if (!busy && it->second->last_active < cutoff) {
      bytes_ -= it->second->footprint_bytes;
      it = episodes_.erase(it);
    } else {
      ++it;
    }
  }
}

Episodes::Usage Episodes::usage() const {
  std::lock_guard lock(mutex_);
  return Usage{episodes_.size(), bytes_};
}

}  // namespace crucible::env
