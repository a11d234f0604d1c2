// Builds the step pipeline this server can actually run, from what the machine offers.
#pragma once

#include <string>

#include "env/pipeline.hpp"
#include "sandbox/gpu_probe.hpp"

namespace crucible::env {

struct PipelineOptions {
  sandbox::GpuProbe gpus;
};

// validate -> compile -> gpu. Stages this build or machine cannot run become UnavailableStage
// with the reason, so steps that reach them are answered infra_error truthfully.
Pipeline build_pipeline(const PipelineOptions& options);

}  // namespace crucible::env
