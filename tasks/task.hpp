// The validated, in-memory form of one task manifest (tasks/<category>/<name>/task.toml).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/expr.hpp"
#include "core/result.hpp"

namespace crucible::tasks {

// How a kernel uses a tensor. kIn is read-only (the runner checks it is unchanged), kOut is
// write-only (poisoned before the candidate runs; every element must be written), kInOut is
// read and updated in place (e.g. fused_add_rms_norm's residual).
enum class Role { kIn, kOut, kInOut };
std::string_view role_name(Role role);  // "in", "out", "inout"
std::optional<Role> role_from_name(std::string_view name);
inline bool is_output(Role role) { return role != Role::kIn; }
inline bool is_input(Role role) { return role != Role::kOut; }

// The production categories of DESIGN.md §3, by manifest name:
// "llm" (dense and MoE LLMs), "ssm" (linear attention and state-space models), "diffusion"
// (vision/video/audio diffusion), "multimodal" (multimodal and encoders), "edge" (edge and
// detection), "science" (3D, robotics and science), "recsys" (recommendation), "world" (world
// models and diffusion LLMs).
const std::vector<std::string>& known_categories();
// Checkers a manifest may name (`checker = "..."`), implemented in judge/task_checker.hpp:
// "topk" (top-k routing: any order of tied scores is right), "moe_align" (MoE token alignment:
// any order inside an expert's segment).
const std::vector<std::string>& known_checkers();
// Vendor libraries a task's reference may be computed by (`[reference] library`), instead of its
// NVRTC source: "cublaslt" (out[M, N] = input[M, K] @ weight[N, K]^T, bf16) and
// "cublaslt_fp8_rowwise" (out[M, N] = a_scales[M] * b_scales[N] * (a[M, K] @ b[N, K]^T), fp8
// e4m3 operands, fp32 scales, bf16 out).
const std::vector<std::string>& known_reference_libraries();

// Where a tensor's input values come from. Generated kinds are filled on the host by
// tasks/generators.hpp from a seed; kCaptured names a tensor recorded from a real model run.
enum class GeneratorKind {
  kRandn,            // normal(mean, std)
  kUniform,          // uniform in [lo, hi); integers: lo <= v < hi
  kConstant,         // every element = value
  kOnes,             // every element = 1
  kZeros,            // every element = 0
  kPositions,        // integer token positions: (start + i) % max, start drawn from the seed
  kRouting,          // MoE expert ids: k distinct experts a row, Zipf popularity (Plackett-Luce)
  kCaptured,         // safetensors file + tensor name
  kPermutation,      // distinct integers in [0, max) in seeded order; a share `pad` set to -1
  kRopeCache,        // rotary cos/sin table: row p = cos(p * f_k) for k < dim/2, then sin(p * f_k)
  kList,             // element i = values[i mod values.size()]: fixed lengths, fixed sizes
  kPowerLawOffsets,  // CSR row / jagged bag offsets, rows + 1 of them, power-law segment sizes
  kSurfacePoints,    // xyz points on a floor plane and `objects` spheres resting on it
  kMropePositions,   // [3, tokens] t/h/w position ids of a VLM prompt: text and image grids
  kDetections,       // detector candidates: boxes, scores or class ids of clustered detections
  kZipf,             // integer ids in [0, max), power-law popular, hot ids scattered over [0, max)
};
std::string_view generator_name(GeneratorKind kind);
std::optional<GeneratorKind> generator_from_name(std::string_view name);

// The layout of mrope_positions (docs/tasks.md): sequences of `sequence` tokens packed into
// `tokens`, each a repetition of `text` text tokens then `frames` x grid_h x grid_w vision tokens.
struct MropeLayout {
  std::int64_t tokens = 1;         // tokens of the [3, tokens] tensor (num_tokens)
  std::int64_t sequence = 1;       // tokens a packed sequence (1: a decode batch)
  std::int64_t text = 0;           // text tokens before each vision block
  std::int64_t frames = 0;         // temporal patches of a vision block (1: an image; 0: text only)
  std::int64_t grid_h = 1;         // merged patch rows of a vision block
  std::int64_t grid_w = 1;         // merged patch columns
  std::int64_t temporal_step = 1;  // temporal position advance a frame (Qwen2.5-VL: seconds)
};

// The scene of the detections generator (docs/tasks.md): which tensor of a candidate set it
// fills, and the batch's layout.
enum class DetectionField { kBoxes, kScores, kClasses };
struct DetectionScene {
  DetectionField field = DetectionField::kBoxes;
  std::int64_t per_image = 1;  // candidates an image (box i is in image i / per_image)
  std::int64_t objects = 1;    // objects an image
  std::int64_t classes = 80;   // class count (COCO: 80)
  double size = 640.0;         // image side, pixels
};

struct GeneratorSpec {
  GeneratorKind kind = GeneratorKind::kRandn;
  double mean = 0.0;                // randn
  double std = 1.0;                 // randn
  double lo = 0.0;                  // uniform
  double hi = 1.0;                  // uniform
  double value = 0.0;               // constant
  std::int64_t max = 0;             // positions, permutation, zipf: exclusive upper bound
  std::int64_t topk = 0;            // routing: experts per token (row length); max = experts
  double skew = 0.0;                // routing: Zipf exponent of expert popularity (0: uniform);
                                    // power_law_offsets: exponent of the segment sizes;
                                    // zipf: exponent of the id popularities
  std::int64_t rows = 0;            // power_law_offsets: segments (offsets 0 .. rows); max = total
  DetectionScene detections;        // detections: field and layout
  MropeLayout mrope;                // mrope_positions: the prompt layout; max = positions bound
  double pad = 0.0;                 // permutation: share of elements set to -1 (padding)
  std::int64_t dim = 0;             // rope_cache: row length (rotary dims), even
  double theta = 10000.0;           // rope_cache: base of the inverse frequencies
  std::vector<double> list;         // list: the values, repeated
  std::string file;                 // captured: path as written (relative to the task folder)
  std::filesystem::path file_path;  // captured: resolved absolute path (checked to exist)
  std::string tensor;               // captured: tensor name inside the file
  std::string note;                 // free-form provenance, e.g. "Llama-3.1-8B layer 0, ShareGPT"
};
// Provenance text shown in views and logs, e.g. "randn(mean=0, std=1)",
// "captured(llama.safetensors#layers.0.input)". Never includes a seed.
std::string describe(const GeneratorSpec& spec);
// "boxes", "scores" or "classes".
const char* detection_field_name(DetectionField field);

// Per-output comparison: |candidate - reference| <= atol + rtol * |reference|, every element.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};

struct SymbolSpec {
  std::string name;
  std::string description;
  core::DType dtype = core::DType::kI32;  // C type the value is passed as to kernels: i32 or i64
};

struct TensorSpec {
  std::string name;
  core::DType dtype;
  // Symbol names or decimal integer literals, outermost first; row-major, contiguous.
  std::vector<std::string> shape;
  Role role;
  std::string description;
  // Default value generator; required for kIn and kInOut, absent for kOut.
  std::optional<GeneratorSpec> values;
  // Set for kOut and kInOut: the per-output entry, else the task's default for the dtype.
  std::optional<Tolerance> tolerance;
};

struct ScalarSpec {
  std::string name;
  core::DType dtype;  // f32, f64, i32 or i64
  std::string description;
  std::optional<double> default_value;  // used by cases that give no value
};

struct Case {
  std::string name;
  std::map<std::string, std::int64_t> symbols;  // every task symbol, each > 0
  double weight = 1.0;                          // > 0; relative share of production calls
  bool hidden = false;                          // correctness only, never shown to agents
  std::map<std::string, double> scalars;        // every task scalar (defaults filled in)
  // Effective generator for every kIn/kInOut tensor (case overrides applied).
  std::map<std::string, GeneratorSpec> values;
  // Seed policy: a fixed seed, or nullopt = derived from the episode seed (see case_seed).
  std::optional<std::uint64_t> seed;
  std::string note;  // where the shape comes from, e.g. "Llama-3-8B decode, batch 32"
};

struct Roofline {
  std::string bytes;      // integer expression over the symbols: bytes moved to and from HBM
  std::string flops;      // integer expression: floating-point operations
  core::Expr bytes_expr;  // parsed forms, set by the registry
  core::Expr flops_expr;
};

// Something every case of a task guarantees, which a kernel may rely on (`[[promises]]`):
// `holds` is an integer expression over the symbols, kept when it is non-zero.
struct Promise {
  std::string holds;
  std::string text;  // the promise in words, e.g. "in_features is a multiple of 8"
  core::Expr expr;
};

// The production library a task's reference is measured against by the parity benchmark
// (`[parity]`, bench/gpu/parity.py): Python calls in a module of the task folder. Never shown to
// agents.
enum class ParityKind {
  kComposite,  // a PyTorch composition of the op, timed eagerly and under torch.compile
  kKernel,     // one named library kernel, timed eagerly; its output held to the check first
};
std::string_view parity_kind_name(ParityKind kind);  // "composite", "kernel"
std::optional<ParityKind> parity_kind_from_name(std::string_view name);

struct ParityAnchor {
  std::string name;         // label in reports: "FlashAttention-2 varlen"
  std::string description;  // what the library is: "cuBLAS via torch.mm"
  ParityKind kind = ParityKind::kComposite;
  std::string function;  // the module's function making the call: fn(torch, t, s, sym)
};

struct Parity {
  std::string module;                 // as written, relative to the task folder: "parity.py"
  std::filesystem::path module_path;  // resolved absolute path (checked to exist)
  // Module functions, or empty: `prepare(torch, t, s, sym)` runs once per input copy, untimed,
  // before any call; `check(torch, t, s)` gives the exact outputs a kernel anchor is held to
  // (required when there is a kernel anchor); `canonical(torch, out)` puts a kernel anchor's
  // output in the check's order, untimed, for ops whose output order is free (top-k).
  std::string prepare;
  std::string check;
  std::string canonical;
  std::vector<ParityAnchor> anchors;  // at least one; at most one kComposite; names unique
};

struct Task {
  std::string id, category, module, title, description;
  // The checker that judges all outputs of a case together (one of known_checkers()), for
  // outputs with several right answers; empty: each output compared elementwise.
  std::string checker;
  std::vector<std::string> symbols;      // symbol names in declaration order
  std::vector<SymbolSpec> symbol_specs;  // same order, with descriptions and dtypes
  std::vector<TensorSpec> tensors;       // kernel argument order of the production module
  std::vector<ScalarSpec> scalars;
  std::vector<Case> cases;  // visible cases first, then hidden, manifest order
  std::map<std::string, Tolerance> tolerance_defaults;  // by dtype name
  Roofline roofline;
  std::vector<Promise> promises;
  std::string reference_path;    // as in the manifest, relative to home: "kernels/llm/rms_norm.cu"
  std::string reference_source;  // its text
  // The library that computes the reference outputs and times (one of
  // known_reference_libraries()), or empty: the reference source is launched. With a library,
  // the source is the starting point shown to agents, held to the same oracle.
  std::string reference_library;
  // What the parity benchmark measures the reference against; absent when the manifest has no
  // [parity] table (the registry's tests require one of every shipped task).
  std::optional<Parity> parity;
  std::filesystem::path manifest_path;  // absolute path of task.toml
  // sha256 (hex) over what defines the task: the manifest's bytes, the reference source and
  // every captured file its cases read. The server sends it with each GPU job and a runner whose
  // own copy differs refuses the job, so the two can never judge by different definitions.
  std::string content_hash;

  // The task's folder (tasks/<category>/<name>/) and the correct example solution in it.
  std::filesystem::path folder() const { return manifest_path.parent_path(); }
  std::filesystem::path solution_path() const { return folder() / "solution.cu"; }

  const TensorSpec* find_tensor(std::string_view name) const;
  const ScalarSpec* find_scalar(std::string_view name) const;
  const Case* find_case(std::string_view name) const;
  std::vector<const Case*> visible_cases() const;
  std::vector<const Case*> hidden_cases() const;
};

// The concrete shape of `tensor` in `c`: literals parsed, symbols looked up.
// Errors (kInvalidArgument) only for a Task that did not come from the registry.
core::Result<std::vector<std::int64_t>> resolve_shape(const TensorSpec& tensor, const Case& c);
// The text of the first of `promises` that `symbols` break (a promise that cannot be evaluated
// counts as broken), or nullopt when they keep them all.
std::optional<std::string> broken_promise(const std::vector<Promise>& promises,
                                          const std::map<std::string, std::int64_t>& symbols);
// Product of resolve_shape (element count); kInvalidArgument on overflow.
core::Result<std::int64_t> element_count(const TensorSpec& tensor, const Case& c);

// Seed of a case's values for one episode: the case's fixed seed if it has one, else a mix of
// `episode_seed` and the case name. Stable across machines and releases.
std::uint64_t case_seed(const Case& c, std::uint64_t episode_seed);
// Seed of one tensor's values: mix of the case seed, the tensor name and `draw` (0 for the
// correctness run, 1 for the second run on different inputs, 2.. for timed calls).
std::uint64_t tensor_seed(std::uint64_t case_seed, std::string_view tensor_name,
                          std::uint64_t draw = 0);

}  // namespace crucible::tasks
