// The trajectory-log record of a step or score: everything needed to re-score it.
#pragma once

#include <cstdint>
#include <string>

#include "core/protocol.hpp"
#include "core/value.hpp"
#include "env/pipeline.hpp"
#include "env/step_result.hpp"

namespace crucible::env {

// The record of `job` answered with `result`, made by a server compiling for `arch` on `gpus`
// (runner::probe_gpus): {kind, time, server_version, arch, gpus, task, seed, source, plan,
// reward_spec, result, reward}, plus {episode, step} when `episode_id` is not empty (a step of an
// episode; a score has none). `result` is the reward after any episode shaping. Pure but for the
// time of day.
core::Value step_record(core::Op op, const StepJob& job, const StepResult& result,
                        const std::string& arch, const core::Value& gpus,
                        const std::string& episode_id = {}, std::uint32_t step = 0);

}  // namespace crucible::env
