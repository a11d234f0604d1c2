// The trajectory-log record of a step or score (step_record.hpp).
#include "env/step_record.hpp"

#include "core/text_file.hpp"

#ifndef CRUCIBLE_VERSION
#define CRUCIBLE_VERSION "0.0.0"
#endif

namespace crucible::env {

core::Value step_record(core::Op op, const StepJob& job, const StepResult& result,
                        const std::string& arch, const core::Value& gpus,
                        const std::string& episode_id, std::uint32_t step) {
  core::Value record{{"kind", core::op_name(op)},
                     {"time", core::utc_time_text()},
                     {"server_version", CRUCIBLE_VERSION},
                     {"arch", arch},
                     {"gpus", gpus},
                     {"task", job.task->id},
                     {"seed", job.seed},
                     {"source", job.source},
                     {"plan", job.plan},
                     {"reward_spec", rewards::reward_spec_to_value(job.reward_spec)},
                     {"result", result.to_value()},
                     {"reward", result.reward.total}};
  if (!job.tag.is_null()) record["tag"] = job.tag;
  if (!episode_id.empty()) {
    record["episode"] = episode_id;
    record["step"] = step;
  }
  return record;
}

}  // namespace crucible::env
