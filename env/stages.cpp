// Pipeline assembly.
#include "env/stages.hpp"

#include <memory>

namespace crucible::env {

Pipeline build_pipeline(const PipelineOptions& options) {
  Pipeline pipeline;
  pipeline.add(std::make_unique<ValidateStage>());
  pipeline.add(std::make_unique<UnavailableStage>(
      "compile", "the compile stage is not part of this server build yet"));
  const std::string gpu_reason =
      options.gpus.gpus.empty()
          ? options.gpus.reason
          : "the GPU runner is not part of this server build yet (found " +
                std::to_string(options.gpus.gpus.size()) + " CUDA device(s))";
  pipeline.add(std::make_unique<UnavailableStage>("gpu", gpu_reason));
  return pipeline;
}

}  // namespace crucible::env
