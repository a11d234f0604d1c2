// The model check (model_check.hpp): buffers, fills, the step's launches, its CUDA graphs, their
// interleaved timing, the hidden-state comparison and greedy tokens.
#include "runner/child/model_check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "judge/timing_stats.hpp"
#include "model/llama2c.hpp"
#include "model/model.hpp"
#include "model/values.hpp"
#include "runner/child/cuda_check.hpp"
#include "runner/child/device_values.hpp"
#include "runner/child/launch_config.hpp"
#include "runner/child/library_reference.hpp"
#include "runner/child/loaded_module.hpp"
#include "tasks/generators.hpp"

namespace crucible::runner::child {
namespace {

using core::Value;
using Clock = std::chrono::steady_clock;

// The model check's own failures (not the device's): reported as {error}.
struct CheckError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double median_of(const std::vector<double>& values) { return judge::summarize(values).median_ns; }

// Row `row` of bf16 logits [rows, vocab]: the id of the largest, the lowest id among equals
// (greedy decoding's choice).
std::size_t argmax_row(const std::vector<std::uint16_t>& logits, std::size_t row,
                       std::size_t vocab) {
  std::size_t best = 0;
  float top = -INFINITY;
  for (std::size_t v = 0; v < vocab; ++v) {
    const float x = tasks::bf16_to_float(logits[row * vocab + v]);
    if (x > top) {
      top = x;
      best = v;
    }
  }
  return best;
}

// The code of one task the step calls: its reference (kernels or a library) and, for the job's
// task, the candidate.
struct TaskCode {
  const tasks::Task* task = nullptr;
  action::PlanContext context;
  const action::EvaluatedPlan* reference_plan = nullptr;  // concrete plans: one per call site
  std::unique_ptr<LoadedModule> reference;
  std::unique_ptr<LibraryReference> library;
  const action::EvaluatedPlan* candidate_plan = nullptr;  // the job's task only
  std::unique_ptr<LoadedModule> candidate;
  std::size_t next_site = 0;  // the call site (of all steps, in order) expanded next
};

// One call site of a step at some variables, with its plans evaluated there.
struct SitePlan {
  const model::CallSite* site = nullptr;
  TaskCode* code = nullptr;
  std::size_t library_index = 0;
  action::ConcretePlan reference;
  std::optional<action::ConcretePlan> candidate;
  std::vector<DeviceBuffer> workspaces;  // the larger of the two sides' sizes, shared by layers
  std::vector<std::vector<std::int64_t>> shapes;
};

// A step expanded at some variables.
struct Expansion {
  model::Values values;
  std::vector<model::CallSite> sites;
  std::vector<SitePlan> plans;
};

struct ModelBuffer {
  const model::Buffer* spec = nullptr;
  DeviceBuffer memory;
  std::size_t layer_bytes = 0;  // one layer's copy at capacity (per-layer buffers)
  std::size_t elements = 0;     // one copy's elements at capacity
};

class ModelCheckRun {
 public:
  ModelCheckRun(const RunJob& job, const tasks::Registry& registry, Device& device,
                KernelTimer& timer)
      : job_(job), check_(*job.model), registry_(registry), device_(device), timer_(timer) {}

  Value run();

 private:
  void load();
  TaskCode& code_for(const tasks::Task& task);
  Expansion expand(const std::map<std::string, std::int64_t>& variables, std::size_t id);
  void allocate(const model::Values& capacity);
  void fill_weights_and_cache(bool zero_cache);
  void write_metadata(const Expansion& step);
  // Enqueues the step's calls on the stream; `owners` (when given) gets, per kernel or memset
  // the step issues, the index of the call site that issued it.
  void enqueue(Expansion& step, bool with_candidate, std::vector<std::size_t>* owners);
  void launch_site(SitePlan& plan, std::int64_t layer, bool with_candidate);
  void gather_rows(const model::Call& call, const model::GatherRows& rows);
  CUdeviceptr address(const std::string& buffer, std::int64_t layer) const;
  void restore_inputs();
  std::vector<std::uint16_t> download_bf16(const std::string& buffer, std::size_t count);
  Value time_step(Expansion& step);
  Value compare_hidden_states(Expansion& step, CUgraphExec reference, CUgraphExec candidate);
  Value greedy_tokens();

  const RunJob& job_;
  const ModelCheck& check_;
  const tasks::Registry& registry_;
  Device& device_;
  KernelTimer& timer_;
  model::Model model_;
  std::optional<model::Weights> weights_;
  std::map<std::string, TaskCode> code_;
  std::map<std::string, ModelBuffer> buffers_;
  DeviceBuffer hidden_pristine_;
  std::size_t next_library_index_ = 0;
};

Value ModelCheckRun::run() {
  load();
  Value out{{"model", model_.name}, {"variables", check_.steps.front()}};
  Expansion step = expand(check_.steps.front(), 0);
  allocate(step.values);
  fill_weights_and_cache(false);
  write_metadata(step);
  std::int64_t calls = 0;
  for (const auto& site : step.sites) calls += site.count;
  out["calls"] = calls;
  out.update(time_step(step));
  buffers_.clear();
  hidden_pristine_ = DeviceBuffer();
  if (check_.steps.size() > 1 && !model_.prompts.empty()) out["tokens"] = greedy_tokens();
  return out;
}

void ModelCheckRun::load() {
  const auto file = registry_.home() / "models" / check_.model;
  auto loaded = model::load_model(file, registry_);
  if (!loaded) throw CheckError(loaded.error().message);
  model_ = std::move(loaded).value();
  if (model_.weights != "synthetic") {
    auto weights = model::read_llama2c(registry_.home() / model_.weights, model_);
    if (!weights) throw CheckError(weights.error().message);
    weights_ = std::move(weights).value();
  }
  for (const auto& call : model_.calls) (void)code_for(*call.task);
  if (!code_.contains(job_.task))
    throw CheckError("model " + model_.name + " never calls " + job_.task);
}

TaskCode& ModelCheckRun::code_for(const tasks::Task& task) {
  auto found = code_.find(task.id);
  if (found != code_.end()) return found->second;
  TaskCode code;
  code.task = &task;
  code.context = action::make_plan_context(task, static_cast<std::int64_t>(device_.max_smem_optin));
  const CompiledModule* compiled = nullptr;
  for (const auto& reference : check_.references) {
    if (reference.task != task.id) continue;
    if (reference.task_hash != task.content_hash) {
      throw CheckError("the task definition of " + task.id +
                       " differs from the server's; restart the server");
    }
    compiled = &reference.compiled;
    code.reference_plan = &reference.plan;
  }
  if (compiled == nullptr) throw CheckError("the job carries no reference of " + task.id);
  if (task.id == job_.task) {
    code.candidate_plan = &check_.candidate;
    code.candidate =
        std::make_unique<LoadedModule>(job_.candidate, check_.candidate.plan, code.context, true);
  }
  if (!task.reference_library.empty()) {
    try {
      code.library = make_library_reference(task.reference_library);
    } catch (const std::exception& e) {
      throw CheckError(task.id + "'s reference library: " + e.what());
    }
  } else {
    code.reference =
        std::make_unique<LoadedModule>(*compiled, code.reference_plan->plan, code.context, false);
  }
  return code_.emplace(task.id, std::move(code)).first->second;
}

Expansion ModelCheckRun::expand(const std::map<std::string, std::int64_t>& variables,
                                std::size_t id) {
  auto expanded = model::expand_step(model_, variables);
  if (!expanded) throw CheckError(expanded.error().message);
  Expansion step;
  step.values = std::move(expanded->first);
  step.sites = std::move(expanded->second);
  LibraryHooks hooks;
  hooks.stream = device_.stream;
  std::uint32_t flushes = 0;
  hooks.flush_l2 = [&] { device_.flush_l2(flushes++); };
  std::uint64_t tag = 1;
  hooks.count_kernels = [&](const std::function<void()>& enqueue) {
    return timer_.count_operations(device_.stream, 1000000 + id * 1000 + tag++, enqueue);
  };
  for (const auto& site : step.sites) {
    SitePlan plan;
    plan.site = &site;
    plan.code = &code_for(*site.call->task);
    const tasks::Task& task = *plan.code->task;
    for (const auto& tensor : task.tensors) {
      auto shape = tasks::resolve_shape(tensor, site.shapes);
      if (!shape) throw CheckError(site.shapes.name + ": " + shape.error().message);
      plan.shapes.push_back(std::move(shape).value());
    }
    if (plan.code->library) {
      plan.library_index = next_library_index_++;
      try {
        plan.code->library->prepare_case(plan.library_index, plan.shapes,
                                         task.tensors.front().dtype, true, hooks);
      } catch (const CudaFailure&) {
        throw;
      } catch (const std::exception& e) {
        throw CheckError(site.shapes.name + ": reference library: " + e.what());
      }
    }
    // The server's evaluation of the plans at this site (the same expansion, in the same order).
    const std::size_t k = plan.code->next_site++;
    if (k >= plan.code->reference_plan->cases.size() ||
        (plan.code->candidate && k >= plan.code->candidate_plan->cases.size())) {
      throw CheckError("the job's plans of " + task.id +
                       " cover fewer call sites than the model's");
    }
    plan.reference = plan.code->reference_plan->cases[k];
    if (plan.code->candidate) plan.candidate = plan.code->candidate_plan->cases[k];
    const std::size_t workspaces =
        std::max(plan.reference.workspace_bytes.size(),
                 plan.candidate ? plan.candidate->workspace_bytes.size() : std::size_t{0});
    for (std::size_t w = 0; w < workspaces; ++w) {
      std::uint64_t bytes =
          w < plan.reference.workspace_bytes.size() ? plan.reference.workspace_bytes[w] : 0;
      if (plan.candidate && w < plan.candidate->workspace_bytes.size()) {
        bytes = std::max(bytes, plan.candidate->workspace_bytes[w]);
      }
      plan.workspaces.emplace_back(static_cast<std::size_t>(std::max<std::uint64_t>(bytes, 1)),
                                   false);
    }
    step.plans.push_back(std::move(plan));
  }
  // Sites refer into step.sites; the vector is not resized after this point.
  for (std::size_t i = 0; i < step.plans.size(); ++i) step.plans[i].site = &step.sites[i];
  return step;
}

void ModelCheckRun::allocate(const model::Values& capacity) {
  buffers_.clear();
  const std::int64_t layers = model_.constants.at("layers");
  for (const auto& spec : model_.buffers) {
    std::int64_t elements = 1;
    for (const auto& dim : spec.shape) {
      auto value = dim.eval(capacity);
      if (!value) throw CheckError("buffer " + spec.name + ": " + value.error().message);
      elements *= *value;
    }
    ModelBuffer buffer;
    buffer.spec = &spec;
    buffer.elements = static_cast<std::size_t>(elements);
    buffer.layer_bytes = buffer.elements * core::dtype_size(spec.dtype);
    const std::size_t copies = spec.per_layer ? static_cast<std::size_t>(layers) : 1;
    buffer.memory = DeviceBuffer(buffer.layer_bytes * copies, false);
    check(cuMemsetD8Async(buffer.memory.data(), 0, buffer.memory.bytes(), device_.stream),
          "clear a model buffer");
    buffers_.emplace(spec.name, std::move(buffer));
  }
  const auto& hidden = buffers_.at("hidden");
  hidden_pristine_ = DeviceBuffer(hidden.memory.bytes(), false);
}

// Weights from the checkpoint or the model's generators; caches from their generators (a timed
// step's earlier tokens) or zero (greedy decoding fills them itself). Seeds are
// model::value_seed's, so every runner, every job and the float64 oracle see the same model.
void ModelCheckRun::fill_weights_and_cache(bool zero_cache) {
  for (auto& [name, buffer] : buffers_) {
    const std::uint64_t seed = model::value_seed(model_, name);
    const std::string& kind = buffer.spec->kind;
    if (kind != "weight" && kind != "cache") continue;
    const core::DType dtype = buffer.spec->dtype;
    const std::size_t count = buffer.memory.bytes() / core::dtype_size(dtype);
    if (kind == "cache" && zero_cache) continue;  // cleared at allocation
    if (kind == "weight" && weights_) {
      const auto found = weights_->buffers.find(name);
      if (found == weights_->buffers.end()) throw CheckError("the checkpoint has no " + name);
      if (found->second.size() != count || dtype != core::DType::kBF16) {
        throw CheckError("the checkpoint's " + name + " does not fit its buffer");
      }
      std::vector<std::uint16_t> bits(count);
      for (std::size_t i = 0; i < count; ++i) {
        bits[i] = tasks::bf16_from_float(static_cast<float>(found->second[i]));
      }
      check(cuMemcpyHtoD(buffer.memory.data(), bits.data(), count * 2), "upload weights");
      continue;
    }
    const auto& spec = model_.values.at(name);
    if (generates_on_device(spec, dtype)) {
      generate_on_device(device_, spec, dtype, seed, 0, count, buffer.memory.data());
    } else {
      auto bytes = tasks::generate(spec, dtype, static_cast<std::int64_t>(count), seed);
      if (!bytes) throw CheckError("values of " + name + ": " + bytes.error().message);
      check(cuMemcpyHtoD(buffer.memory.data(), bytes->data(), bytes->size()), "upload values");
    }
  }
  check(cuStreamSynchronize(device_.stream), "fill the model's buffers");
}

// The step metadata of `step` (model::step_metadata): every sequence `context` tokens long
// after the step, its last num_tokens / num_seqs tokens (one in a decode step, `prompt` in a
// prefill) the new ones.
void ModelCheckRun::write_metadata(const Expansion& step) {
  const std::int64_t seqs = step.values.at("num_seqs");
  const std::int64_t context = step.values.at("context");
  const std::int64_t fresh = step.values.at("num_tokens") / seqs;
  if (fresh > context) {
    throw CheckError("context " + std::to_string(context) + " is shorter than the step's " +
                     std::to_string(fresh) + " new tokens a sequence");
  }
  const auto meta = model::step_metadata(
      step.values, std::vector<std::int64_t>(static_cast<std::size_t>(seqs), context - fresh),
      fresh);
  const auto upload = [&](const char* name, const auto& values) {
    check(cuMemcpyHtoD(buffers_.at(name).memory.data(), values.data(),
                       values.size() * sizeof(values[0])),
          "upload step metadata");
  };
  upload("positions", meta.positions);
  upload("slot_mapping", meta.slot_mapping);
  upload("block_tables", meta.block_tables);
  upload("seq_lens", meta.seq_lens);
  if (buffers_.contains("query_start_loc")) upload("query_start_loc", meta.query_start_loc);
}

// A call's gather (model.hpp): one strided copy on the stream, captured as a memcpy node of the
// step's graph. CUPTI records kernels and memsets only, so the copy has no record of its own;
// its time is in the step's span, between the kernels around it.
void ModelCheckRun::gather_rows(const model::Call& call, const model::GatherRows& rows) {
  const auto& from = buffers_.at(call.gather->from);
  const auto& into = buffers_.at(call.gather->into);
  const std::size_t row_bytes =
      static_cast<std::size_t>(rows.width) * core::dtype_size(from.spec->dtype);
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = from.memory.data() + static_cast<std::size_t>(rows.first) * row_bytes;
  copy.srcPitch = static_cast<std::size_t>(rows.stride) * row_bytes;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = into.memory.data();
  copy.dstPitch = row_bytes;
  copy.WidthInBytes = row_bytes;
  copy.Height = static_cast<std::size_t>(rows.count);
  check(cuMemcpy2DAsync(&copy, device_.stream), "gather a call's rows");
}

CUdeviceptr ModelCheckRun::address(const std::string& buffer, std::int64_t layer) const {
  const auto& b = buffers_.at(buffer);
  return b.memory.data() +
         (b.spec->per_layer ? static_cast<std::size_t>(layer) * b.layer_bytes : 0);
}

void ModelCheckRun::launch_site(SitePlan& plan, std::int64_t layer, bool with_candidate) {
  const tasks::Task& task = *plan.code->task;
  std::vector<CUdeviceptr> tensors;
  for (const auto& tensor : task.tensors) {
    tensors.push_back(address(plan.site->call->tensors.at(tensor.name), layer));
  }
  const bool candidate = with_candidate && plan.candidate.has_value();
  if (!candidate && plan.code->library) {
    plan.code->library->launch(plan.library_index, tensors, device_.stream);
    return;
  }
  const action::ConcretePlan& concrete = candidate ? *plan.candidate : plan.reference;
  const action::LaunchPlan& launch_plan =
      candidate ? plan.code->candidate_plan->plan : plan.code->reference_plan->plan;
  LoadedModule& module = candidate ? *plan.code->candidate : *plan.code->reference;
  std::vector<CUdeviceptr> workspaces;
  for (const auto& w : plan.workspaces) workspaces.push_back(w.data());
  std::vector<CUtensorMap> maps;
  check(encode_tensor_maps(concrete.tensor_maps, tensors, maps, cuTensorMapEncodeTiled),
        candidate ? "encode the candidate's tensor maps in the model step"
                  : "encode a reference's tensor maps in the model step");
  for (const auto& step : concrete.launches) {
    const action::Launch& launch = launch_plan.launches[step.launch];
    LoadedKernel& kernel = module.kernel(launch.name_expression);
    if (needs_dynamic_smem_optin(kernel, step.smem_bytes)) {
      check(cuFuncSetAttribute(kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(step.smem_bytes)),
            "allow dynamic shared memory");
      kernel.configured_smem = static_cast<int>(step.smem_bytes);
    }
    auto storage = action::pack_launch_args(launch, task, plan.site->shapes, kernel.param_bytes,
                                            tensors, workspaces);
    if (!storage) throw CheckError(plan.site->call->site + ": " + storage.error().message);
    check(launch_packed(kernel.function, launch, step, *storage, maps, device_.stream),
          candidate ? "launch the candidate in the model step"
                    : "launch a reference in the model step");
  }
}

void ModelCheckRun::enqueue(Expansion& step, bool with_candidate,
                            std::vector<std::size_t>* owners) {
  const std::int64_t layers = model_.constants.at("layers");
  const auto run = [&](std::size_t i, std::int64_t layer) {
    SitePlan& plan = step.plans[i];
    if (const auto& rows = step.sites[i].gather) gather_rows(*step.sites[i].call, *rows);
    launch_site(plan, layer, with_candidate);
    if (owners == nullptr) return;
    const bool candidate = with_candidate && plan.candidate.has_value();
    const std::size_t operations =
        !candidate && plan.code->library
            ? plan.code->library->kernels_per_call(plan.library_index)
            : (candidate ? *plan.candidate : plan.reference).launches.size();
    owners->insert(owners->end(), operations, i);
  };
  // Program order: the calls before the layer block once, the block `layers` times, the rest.
  for (std::size_t i = 0; i < step.sites.size();) {
    if (!step.sites[i].call->per_layer) {
      run(i++, 0);
      continue;
    }
    std::size_t end = i;
    while (end < step.sites.size() && step.sites[end].call->per_layer) ++end;
    for (std::int64_t layer = 0; layer < layers; ++layer) {
      for (std::size_t k = i; k < end; ++k) run(k, layer);
    }
    i = end;
  }
}

// Every step starts from the same hidden states and a zero residual (the first fused add makes
// the residual the embedding), so repeated steps compute the same thing.
void ModelCheckRun::restore_inputs() {
  const auto& hidden = buffers_.at("hidden");
  check(cuMemcpyDtoDAsync(hidden.memory.data(), hidden_pristine_.data(), hidden.memory.bytes(),
                          device_.stream),
        "restore the step's input");
  const auto& residual = buffers_.at("residual");
  check(cuMemsetD8Async(residual.memory.data(), 0, residual.memory.bytes(), device_.stream),
        "clear the residual");
}

std::vector<std::uint16_t> ModelCheckRun::download_bf16(const std::string& buffer,
                                                        std::size_t count) {
  std::vector<std::uint16_t> out(count);
  check(cuStreamSynchronize(device_.stream), "finish the step");
  check(cuMemcpyDtoH(out.data(), buffers_.at(buffer).memory.data(), count * 2), "read a buffer");
  return out;
}

struct Graph {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ~Graph() {
    if (context_abandoned()) return;
    if (exec != nullptr) cuGraphExecDestroy(exec);
    if (graph != nullptr) cuGraphDestroy(graph);
  }
};

Value ModelCheckRun::time_step(Expansion& step) {
  // The timed step's input: standard normal hidden states (the embedding of some tokens).
  const auto& hidden = buffers_.at("hidden");
  tasks::GeneratorSpec normal;
  generate_on_device(device_, normal, hidden.spec->dtype, model::kStepInputSeed, 0, hidden.elements,
                     hidden_pristine_.data());
  // One direct run of each side first: it readies kernels (shared-memory limits) and fails
  // early, outside a capture, where something cannot launch.
  for (const bool with_candidate : {false, true}) {
    restore_inputs();
    enqueue(step, with_candidate, nullptr);
    check(cuStreamSynchronize(device_.stream), "run the model step");
  }
  Graph graphs[2];
  std::vector<std::size_t> owners[2];
  for (int side = 0; side < 2; ++side) {
    check(cuStreamBeginCapture(device_.stream, CU_STREAM_CAPTURE_MODE_RELAXED), "begin capture");
    try {
      enqueue(step, side == 1, &owners[side]);
    } catch (...) {
      CUgraph broken = nullptr;
      cuStreamEndCapture(device_.stream, &broken);
      if (broken != nullptr) cuGraphDestroy(broken);
      throw;
    }
    check(cuStreamEndCapture(device_.stream, &graphs[side].graph), "end capture");
    check(cuGraphInstantiate(&graphs[side].exec, graphs[side].graph, 0), "instantiate the step");
  }
  // Interleaved launches (ABBA), each timed by CUPTI from its first kernel's start to its last
  // kernel's end; a launch whose records do not match its graph's nodes is not counted.
  std::vector<double> samples[2];
  std::vector<std::vector<double>> site_samples[2];
  for (int side = 0; side < 2; ++side) site_samples[side].assign(step.plans.size(), {});
  const double gate_wait_ms = device_.gate.exclusive();
  const auto started = Clock::now();
  std::uint64_t tag = 1;
  std::size_t mismatched = 0;
  for (int warm = 0; warm < 3; ++warm) {
    for (int side = 0; side < 2; ++side) {
      restore_inputs();
      check(cuGraphLaunch(graphs[side].exec, device_.stream), "launch the step");
    }
  }
  check(cuStreamSynchronize(device_.stream), "warm-up steps");
  (void)timer_.collect();
  judge::SpeedupEstimate estimate;
  while (true) {
    const auto order = judge::interleaved_order(2);
    std::map<std::uint64_t, int> side_of;
    for (const int side : order) {
      restore_inputs();
      side_of[tag] = side;
      {
        const TagScope scope(timer_, tag++);
        check(cuGraphLaunch(graphs[side].exec, device_.stream), "launch the step");
      }
      check(cuStreamSynchronize(device_.stream), "timed step");
    }
    std::unordered_map<std::uint64_t, std::vector<OperationSpan>> operations;
    const auto spans = timer_.collect(&operations);
    for (const auto& [t, side] : side_of) {
      const auto span = spans.find(t);
      const auto ops = operations.find(t);
      if (span == spans.end() || ops == operations.end() ||
          ops->second.size() != owners[side].size()) {
        ++mismatched;
        continue;
      }
      samples[side].push_back(span->second.duration_ns());
      std::vector<double> per_site(step.plans.size(), 0.0);
      for (std::size_t k = 0; k < ops->second.size(); ++k) {
        per_site[owners[side][k]] +=
            static_cast<double>(ops->second[k].end_ns - ops->second[k].start_ns);
      }
      for (std::size_t i = 0; i < per_site.size(); ++i)
        site_samples[side][i].push_back(per_site[i]);
    }
    if (mismatched > 8) {
      throw CheckError("CUPTI's records of the step's graph do not match its calls (" +
                       std::to_string(owners[0].size()) + " and " +
                       std::to_string(owners[1].size()) + " expected)");
    }
    const std::size_t n = std::min(samples[0].size(), samples[1].size());
    const double elapsed_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    if (n >= 2) {
      estimate =
          judge::speedup_estimate(judge::summarize(samples[0]), judge::summarize(samples[1]));
    }
    const double half_width =
        estimate.speedup > 0 ? 0.5 * (estimate.high - estimate.low) / estimate.speedup : 1.0;
    if (n >= check_.max_samples || elapsed_ms > check_.time_cap_ms ||
        (n >= check_.min_samples && half_width <= check_.target_rel_ci)) {
      break;
    }
  }
  if (samples[0].size() < 2 || samples[1].size() < 2) {
    throw CheckError("too few timed steps within the time cap");
  }
  Value out;
  const double reference_ns = median_of(samples[0]);
  const double candidate_ns = median_of(samples[1]);
  out["reference_step_ns"] = reference_ns;
  out["candidate_step_ns"] = candidate_ns;
  out["step_speedup"] = estimate.speedup;
  out["step_speedup_ci95"] = estimate.to_value();
  out["samples"] = std::min(samples[0].size(), samples[1].size());
  out["gate_wait_ms"] = gate_wait_ms;
  out["launches_per_step"] = Value{owners[0].size(), owners[1].size()};
  double op_reference = 0, op_candidate = 0;
  Value sites = Value::array();
  for (std::size_t i = 0; i < step.plans.size(); ++i) {
    const double r = median_of(site_samples[0][i]);
    const double c = median_of(site_samples[1][i]);
    const bool candidate_site = step.plans[i].candidate.has_value();
    if (candidate_site) {
      op_reference += r;
      op_candidate += c;
    }
    sites.push_back(Value{{"site", step.sites[i].call->site},
                          {"task", step.plans[i].code->task->id},
                          {"calls", step.sites[i].count},
                          {"candidate_site", candidate_site},
                          {"reference_ns", r},
                          {"candidate_ns", c}});
  }
  out["sites"] = std::move(sites);
  out["op_share"] = reference_ns > 0 ? op_reference / reference_ns : 0.0;
  if (op_candidate > 0) out["op_speedup"] = op_reference / op_candidate;
  out["hidden_state"] = compare_hidden_states(step, graphs[0].exec, graphs[1].exec);
  return out;
}

// The two steps from the same input: their final hidden states (after the last norm) and the
// top-1 token of their logits, per sequence.
Value ModelCheckRun::compare_hidden_states(Expansion& step, CUgraphExec reference,
                                           CUgraphExec candidate) {
  const std::size_t seqs = static_cast<std::size_t>(step.values.at("num_seqs"));
  const std::size_t width = buffers_.at("hidden").elements;
  const std::size_t vocab = static_cast<std::size_t>(step.values.at("vocab"));
  std::vector<std::uint16_t> hidden[2], logits[2];
  CUgraphExec graphs[2] = {reference, candidate};
  for (int side = 0; side < 2; ++side) {
    restore_inputs();
    check(cuGraphLaunch(graphs[side], device_.stream), "launch the step");
    hidden[side] = download_bf16("hidden", width);
    logits[side] = download_bf16("logits", seqs * vocab);
  }
  double max_abs = 0, diff2 = 0, ref2 = 0;
  std::size_t non_finite = 0;
  for (std::size_t i = 0; i < width; ++i) {
    const double r = tasks::bf16_to_float(hidden[0][i]);
    const double c = tasks::bf16_to_float(hidden[1][i]);
    if (!std::isfinite(r) || !std::isfinite(c)) {
      ++non_finite;
      continue;
    }
    max_abs = std::max(max_abs, std::abs(r - c));
    diff2 += (r - c) * (r - c);
    ref2 += r * r;
  }
  std::size_t agree = 0;
  for (std::size_t s = 0; s < seqs; ++s) {
    agree += argmax_row(logits[0], s, vocab) == argmax_row(logits[1], s, vocab) ? 1 : 0;
  }
  const double rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : 0.0;
  Value out{{"max_abs_diff", max_abs},
            {"rel_l2", rel_l2},
            {"non_finite", non_finite},
            {"top1_agreement", static_cast<double>(agree) / static_cast<double>(seqs)}};
  if (model_.hidden_rel_l2) {
    out["tolerance"] = Value{{"rel_l2", *model_.hidden_rel_l2}};
    out["within_tolerance"] = non_finite == 0 && rel_l2 <= *model_.hidden_rel_l2;
  }
  if (check_.hidden_states) {
    // Each sequence's last token (row (s + 1) * fresh - 1 of the packed tokens).
    const auto row_width = static_cast<std::size_t>(step.values.at("hidden"));
    const auto fresh = static_cast<std::size_t>(step.values.at("num_tokens")) / seqs;
    Value rows = Value::array();
    for (std::size_t s = 0; s < seqs; ++s) {
      std::vector<float> row(row_width);
      for (std::size_t i = 0; i < row_width; ++i) {
        row[i] = tasks::bf16_to_float(hidden[0][((s + 1) * fresh - 1) * row_width + i]);
      }
      rows.push_back(std::move(row));
    }
    out["reference_last_hidden"] = std::move(rows);
  }
  return out;
}

// Greedy decoding of the model's prompts, one token a step for every sequence, with the
// references and then with the candidate, each from an empty cache.
Value ModelCheckRun::greedy_tokens() {
  const auto& prompts = model_.prompts;
  const std::int64_t seqs = static_cast<std::int64_t>(prompts.size());
  const std::int64_t prompt_length = static_cast<std::int64_t>(prompts.front().size());
  const std::int64_t steps = prompt_length + model_.generate - 1;
  if (static_cast<std::int64_t>(check_.steps.size()) != steps + 1) {
    throw CheckError("the job's decoding steps do not match the model's prompts");
  }
  std::vector<Expansion> expansions;
  expansions.reserve(static_cast<std::size_t>(steps));
  for (std::int64_t t = 1; t <= steps; ++t) {
    expansions.push_back(
        expand(check_.steps[static_cast<std::size_t>(t)], static_cast<std::size_t>(t)));
  }
  const std::int64_t vocab = model_.constants.at("vocab");
  const std::int64_t width = model_.constants.at("hidden");
  std::vector<std::vector<std::int64_t>> generated[2];
  for (int side = 0; side < 2; ++side) {
    allocate(expansions.back().values);
    fill_weights_and_cache(true);
    std::vector<std::int64_t> current(static_cast<std::size_t>(seqs));
    for (std::int64_t s = 0; s < seqs; ++s) current[s] = prompts[s][0];
    generated[side].assign(static_cast<std::size_t>(seqs), {});
    for (std::int64_t t = 1; t <= steps; ++t) {
      Expansion& step = expansions[static_cast<std::size_t>(t - 1)];
      write_metadata(step);
      std::vector<std::uint16_t> embedded(static_cast<std::size_t>(seqs * width));
      for (std::int64_t s = 0; s < seqs; ++s) {
        for (std::int64_t i = 0; i < width; ++i) {
          embedded[s * width + i] = tasks::bf16_from_float(
              static_cast<float>(weights_->embedding[current[s] * width + i]));
        }
      }
      check(cuMemcpyHtoD(buffers_.at("hidden").memory.data(), embedded.data(), embedded.size() * 2),
            "upload the embeddings");
      check(cuMemsetD8Async(buffers_.at("residual").memory.data(), 0,
                            buffers_.at("residual").memory.bytes(), device_.stream),
            "clear the residual");
      enqueue(step, side == 1, nullptr);
      const auto logits = download_bf16("logits", static_cast<std::size_t>(seqs * vocab));
      for (std::int64_t s = 0; s < seqs; ++s) {
        const auto best = static_cast<std::int64_t>(
            argmax_row(logits, static_cast<std::size_t>(s), static_cast<std::size_t>(vocab)));
        if (t < prompt_length) {
          current[s] = prompts[s][t];
        } else {
          current[s] = best;
          generated[side][s].push_back(best);
        }
      }
    }
  }
  std::size_t equal = 0, total = 0;
  Value first = nullptr;
  for (std::int64_t s = 0; s < seqs; ++s) {
    bool diverged = false;
    for (std::size_t i = 0; i < generated[0][s].size(); ++i) {
      ++total;
      if (generated[0][s][i] == generated[1][s][i]) {
        ++equal;
      } else if (!diverged) {
        diverged = true;
        if (first.is_null() || first["position"].get<std::size_t>() > i) {
          first = Value{{"sequence", s}, {"position", i}};
        }
      }
    }
  }
  return Value{
      {"prompts", prompts},
      {"generated", model_.generate},
      {"reference", generated[0]},
      {"candidate", generated[1]},
      {"agreement", total > 0 ? static_cast<double>(equal) / static_cast<double>(total) : 1.0},
      {"first_divergence", first}};
}

}  // namespace

core::Value run_model_check(const RunJob& job, const tasks::Registry& registry, Device& device,
                            KernelTimer& timer) {
  const auto started = Clock::now();
  Value out;
  try {
    ModelCheckRun run(job, registry, device, timer);
    out = run.run();
  } catch (const CudaFailure&) {
    throw;
  } catch (const std::exception& e) {
    out = Value{{"error", e.what()}};
    // Leave nothing of the check on the stream for the next job.
    check(cuStreamSynchronize(device.stream), "after the model check");
  }
  out["wall_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  return out;
}

}  // namespace crucible::runner::child
