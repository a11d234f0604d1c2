// Checkers for tasks whose outputs admit several right answers (top-k routing under ties, where
// any order of equal scores is right). A task names one in its manifest (`checker = "topk"`);
// the runner then judges all of a case's outputs with it, together, instead of comparing each
// output element by element with the reference's.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "judge/compare.hpp"

namespace crucible::judge {

struct TaskCheckRequest {
  // Every tensor of the case with its value before the call (in and inout tensors; out tensors
  // hold the poison), in manifest order.
  std::span<const HostTensorView> inputs;
  // Every out and inout tensor after the candidate's call, manifest order.
  std::span<const HostTensorView> candidate;
  // The same tensors after the reference's call on the same inputs.
  std::span<const HostTensorView> reference;
  std::span<const Tolerance> tolerances;                   // per out/inout tensor, same order
  const std::map<std::string, double>* scalars = nullptr;  // the case's scalars
  int poison_variant = 0;
  bool reveal_values = false;
};

class TaskChecker {
 public:
  virtual ~TaskChecker() = default;
  // One report per out/inout tensor, in order, with compare_outputs' contract: `pass`,
  // counts, the first failing element, a one-sentence summary an agent can act on, poison
  // (unwritten) detection, and no expected values unless reveal_values. `reference_nans` > 0
  // when the reference itself is invalid (the server's fault).
  virtual std::vector<CompareReport> check(const TaskCheckRequest& request) const = 0;
};

// The checker registered under `name` (one of tasks::known_checkers()), or nullptr.
const TaskChecker* find_task_checker(std::string_view name);

// Top-k routing (llm/topk_softmax, llm/grouped_topk): outputs topk_weights [T, k] (float),
// topk_indices [T, k] (integer) and, when the task has it, token_expert_indices [T, k]. Defined
// in judge/topk_checker.cpp.
const TaskChecker& topk_checker();

// MoE token alignment (llm/moe_align_block_size): outputs sorted_token_ids, experts_ids and
// num_tokens_post_pad, any order inside an expert's segment. Defined in
// judge/moe_align_checker.cpp.
const TaskChecker& moe_align_checker();

// Top-k/top-p sampling (llm/top_k_top_p_sampling_from_logits): output samples [batch], any
// token whose interval of the filtered CDF holds the row's draw, within fp32 accumulation
// error. Defined in judge/sampling_checker.cpp.
const TaskChecker& sampling_checker();

// Diffusion-LM remasking (world/llada_remask): outputs x0 and transfer_index, any token of a
// tied maximum logit and any choice among tied scores. Defined in
// judge/llada_remask_checker.cpp.
const TaskChecker& llada_remask_checker();

// k nearest neighbours (science/knn): outputs dists and idx, any choice among equidistant
// points. Defined in judge/knn_checker.cpp.
const TaskChecker& knn_checker();

// Batched non-maximum suppression (edge/batched_nms): outputs keep and num_kept, any order of
// tied scores, IoUs next to the threshold either way. Defined in judge/nms_checker.cpp.
const TaskChecker& nms_checker();

// 3D Gaussian splatting projection (science/gaussian_projection): outputs radii, means2d, depths
// and conics; culled Gaussians' other outputs are not read, and culling boundaries and fp32
// rounding are judged from a float64 recomputation. Defined in
// judge/gaussian_projection_checker.cpp.
const TaskChecker& gaussian_projection_checker();

}  // namespace crucible::judge
