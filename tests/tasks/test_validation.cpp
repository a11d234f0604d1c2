// Every manifest problem is reported, all at once, with the file and the key at fault.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tasks/registry.hpp"

using namespace crucible;
using namespace crucible::tasks;

namespace {

namespace fs = std::filesystem;

constexpr const char* kFile = "tasks/llm/toy/task.toml";

// A small valid task; each table row below breaks it in one place.
constexpr const char* kValid = R"toml(id = "llm/toy"
category = "llm"
module = "toy.scale(out, x, alpha)"
title = "Toy"
description = "Scales x."

[reference]
source = "kernels/llm/toy.cu"

[[symbols]]
name = "n"
description = "elements"

[[tensors]]
name = "out"
dtype = "f32"
shape = ["n"]
role = "out"

[[tensors]]
name = "x"
dtype = "bf16"
shape = ["n", 4]
role = "in"
values = { generator = "randn", mean = 0.0, std = 1.0 }

[[scalars]]
name = "alpha"
dtype = "f32"
default = 2.0

[tolerance]
f32 = { atol = 1e-5, rtol = 1e-5 }

[roofline]
bytes = "n * 4 + n * 8"
flops = "n"

[[visible_cases]]
name = "small"
symbols = { n = 16 }
weight = 1.0

[[hidden_cases]]
name = "other"
symbols = { n = 33 }
seed = 5
)toml";

// A scratch repository root with tasks/ and kernels/, removed on destruction.
class ScratchHome {
 public:
  ScratchHome() {
    static std::atomic<int> counter{0};
    root_ = fs::temp_directory_path() /
            ("crucible_tasks_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(root_ / "kernels" / "llm");
    write("kernels/llm/toy.cu", "// @launch toy<<<1, 32>>>(out, x, alpha, n)\n");
  }
  ~ScratchHome() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  ScratchHome(const ScratchHome&) = delete;
  ScratchHome& operator=(const ScratchHome&) = delete;

  void write(const std::string& relative, const std::string& text) const {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_;
};

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "test bug: '" << from << "' not in the manifest");
  return text.replace(at, from.size(), to);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The load error's lines; fails the test if the registry loaded.
std::vector<std::string> load_errors(const ScratchHome& home) {
  auto loaded = Registry::load(home.root());
  if (loaded.ok()) return {};
  CHECK(loaded.error().code == core::ErrorCode::kInvalidArgument);
  return lines_of(loaded.error().message);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += "  " + line + "\n";
  return out;
}

struct BadManifest {
  const char* problem;
  const char* from;
  const char* to;
  const char* expected;  // the whole line, or its start when `prefix`
  bool prefix = false;
};

const BadManifest kBadManifests[] = {
    {"unknown dtype", "dtype = \"bf16\"", "dtype = \"bf17\"",
     "tensors[1].dtype: unknown dtype 'bf17' (known: bf16, f16, f32, f64, fp8_e4m3, fp8_e5m2, "
     "i8, u8, i16, i32, i64, bool)"},
    {"unknown role", "role = \"in\"", "role = \"input\"",
     "tensors[1].role: unknown role 'input' (known: in, out, inout)"},
    {"unknown generator", "generator = \"randn\"", "generator = \"gauss\"",
     "tensors[1].values.generator: unknown generator 'gauss' (known: randn, uniform, constant, "
     "ones, zeros, positions, routing, captured, permutation, rope_cache, list, "
     "power_law_offsets, surface_points, mrope_positions, detections, zipf)"},
    {"routing ids on a floating tensor", "generator = \"randn\", mean = 0.0, std = 1.0",
     "generator = \"routing\", experts = 8, topk = 2",
     "tensors[1].values.generator: 'routing' needs an i32 or i64 tensor, this one is bf16"},
    {"routing top-k above the expert count", "generator = \"randn\", mean = 0.0, std = 1.0",
     "generator = \"routing\", experts = 8, topk = 9",
     "tensors[1].values.topk: must be in [1, experts], got 9"},
    {"routing with a negative skew", "generator = \"randn\", mean = 0.0, std = 1.0",
     "generator = \"routing\", experts = 8, topk = 2, skew = -1.0",
     "tensors[1].values.skew: must be finite and >= 0, got -1"},
    {"input without values", "values = { generator = \"randn\", mean = 0.0, std = 1.0 }\n", "",
     "tensors[1].values: missing: an input tensor needs a value generator, e.g. { generator = "
     "\"randn\", mean = 0.0, std = 1.0 }"},
    {"non-positive randn std", "std = 1.0", "std = 0.0",
     "tensors[1].values.std: must be positive and finite, got 0"},
    {"shape names an undeclared symbol", "shape = [\"n\", 4]", "shape = [\"m\", 4]",
     "tensors[1].shape[0]: undeclared symbol 'm' (declared: n)"},
    {"shape literal of zero", "shape = [\"n\", 4]", "shape = [\"n\", 0]",
     "tensors[1].shape[1]: dimension must be positive, got 0"},
    {"case missing a symbol value", "symbols = { n = 16 }", "symbols = { }",
     "visible_cases[0].symbols: missing value for symbol 'n'"},
    {"case with a zero dimension", "symbols = { n = 16 }", "symbols = { n = 0 }",
     "visible_cases[0].symbols.n: dimension must be positive, got 0"},
    {"case with a negative dimension", "symbols = { n = 33 }", "symbols = { n = -3 }",
     "hidden_cases[0].symbols.n: dimension must be positive, got -3"},
    {"case naming an unknown symbol", "symbols = { n = 16 }", "symbols = { n = 16, k = 2 }",
     "visible_cases[0].symbols.k: unknown symbol (declared: n)"},
    {"zero weight", "weight = 1.0", "weight = 0.0",
     "visible_cases[0].weight: must be positive, got 0"},
    {"negative weight", "weight = 1.0", "weight = -2",
     "visible_cases[0].weight: must be positive, got -2"},
    {"visible case without a weight", "weight = 1.0\n", "",
     "visible_cases[0].weight: missing (a number is required)"},
    {"no visible case", "[[visible_cases]]\nname = \"small\"\nsymbols = { n = 16 }\nweight = 1.0\n",
     "", "visible_cases: at least one visible case is required"},
    {"duplicate case name", "name = \"other\"", "name = \"small\"",
     "hidden_cases[0].name: duplicate case name 'small' (also visible_cases[0])"},
    {"bad seed", "seed = 5", "seed = -5",
     "hidden_cases[0].seed: must be a non-negative integer or \"episode\", got integer"},
    {"missing reference file", "kernels/llm/toy.cu", "kernels/llm/nope.cu",
     "reference.source: reference file 'kernels/llm/nope.cu' does not exist"},
    {"reference outside kernels/", "kernels/llm/toy.cu", "../secrets.cu",
     "reference.source: must be a relative path under kernels/ (e.g. "
     "\"kernels/llm/rms_norm.cu\"), got '../secrets.cu'"},
    {"unknown reference library", "source = \"kernels/llm/toy.cu\"",
     "source = \"kernels/llm/toy.cu\"\nlibrary = \"cudnn\"",
     "reference.library: unknown library 'cudnn' (known: cublaslt, cublaslt_fp8_rowwise)"},
    {"library whose contract the tensors break", "source = \"kernels/llm/toy.cu\"",
     "source = \"kernels/llm/toy.cu\"\nlibrary = \"cublaslt\"",
     "reference.library: \"cublaslt\" computes out[M, N] = input[M, K] @ weight[N, K]^T: the task "
     "needs exactly the tensors (out, input, weight) in that order, roles out, in, in, all bf16, "
     "with shapes [M, N], [M, K], [N, K]"},
    {"fp8 library whose contract the tensors break", "source = \"kernels/llm/toy.cu\"",
     "source = \"kernels/llm/toy.cu\"\nlibrary = \"cublaslt_fp8_rowwise\"",
     "reference.library: \"cublaslt_fp8_rowwise\" computes out[M, N] = a_scales[M] * b_scales[N] "
     "* (a[M, K] @ b[N, K]^T): the task needs exactly the tensors (out, a, b, a_scales, b_scales) "
     "in that order, roles out, in, in, in, in, dtypes bf16, fp8_e4m3, fp8_e4m3, f32, f32, with "
     "shapes [M, N], [M, K], [N, K], [M, 1], [N, 1]"},
    {"library without a starting-point source", "source = \"kernels/llm/toy.cu\"",
     "library = \"cublaslt\"",
     "reference.source: missing (a path relative to the repository root, e.g. "
     "\"kernels/llm/rms_norm.cu\")"},
    {"list generator with a value that is not a number",
     "generator = \"randn\", mean = 0.0, std = 1.0", "generator = \"list\", values = [1, \"2\"]",
     "tensors[1].values.values[1]: must be a finite number"},
    {"list generator that does not repeat whole in a visible case",
     "generator = \"randn\", mean = 0.0, std = 1.0", "generator = \"list\", values = [1, 2, 3]",
     "visible_cases: case 'small': 'x' has 64 elements, not a multiple of its list's 3 values: "
     "timed calls would see different values"},
    {"empty list generator", "generator = \"randn\", mean = 0.0, std = 1.0",
     "generator = \"list\", values = []", "tensors[1].values.values: must not be empty"},
    {"roofline formula that does not parse", "bytes = \"n * 4 + n * 8\"", "bytes = \"n * (4\"",
     "roofline.bytes: cannot parse 'n * (4': column ", true},
    {"roofline formula naming an unknown symbol", "flops = \"n\"", "flops = \"n * k\"",
     "roofline.flops: unknown symbol 'k' (declared: n)"},
    {"roofline formula that is negative for a case", "flops = \"n\"", "flops = \"n - 20\"",
     "roofline.flops: case 'small': evaluates to -4, expected >= 0"},
    {"promise a case breaks", "flops = \"n\"\n",
     "flops = \"n\"\n\n[[promises]]\nholds = \"n % 16 == 0\"\ntext = \"n is a multiple of 16\"\n",
     "promises[0].holds: case 'other' breaks it"},
    {"promise naming an unknown symbol", "flops = \"n\"\n",
     "flops = \"n\"\n\n[[promises]]\nholds = \"m > 0\"\ntext = \"m is positive\"\n",
     "promises[0].holds: unknown symbol 'm' (declared: n)"},
    {"promise without its words", "flops = \"n\"\n",
     "flops = \"n\"\n\n[[promises]]\nholds = \"n > 0\"\n", "promises[0].text: ", true},
    {"output without a tolerance", "f32 = { atol = 1e-5, rtol = 1e-5 }\n", "",
     "tensors[0].tolerance: output 'out' has no tolerance and [tolerance] has no f32 default"},
    {"negative tolerance", "atol = 1e-5", "atol = -1e-5",
     "tolerance.f32.atol: must be finite and >= 0, got -1e-05"},
    {"relative tolerance under one ulp of its dtype", "rtol = 1e-5", "rtol = 1e-8",
     "tolerance.f32.rtol: is under one ulp of f32", true},
    {"id that does not match the folder", "id = \"llm/toy\"", "id = \"llm/toys\"",
     "id: 'llm/toys' does not match the folder (expected 'llm/toy')"},
    {"unknown category", "category = \"llm\"", "category = \"cooking\"",
     "category: unknown category 'cooking' (known: llm, ssm, diffusion, multimodal, edge, "
     "science, recsys, world)"},
    {"unknown top-level key", "title = \"Toy\"", "title = \"Toy\"\ncolour = \"red\"",
     "colour: unknown key (known: id, category, module, title, description, reference, symbols, "
     "tensors, scalars, tolerance, roofline, promises, visible_cases, hidden_cases, checker, "
     "parity)"},
    {"scalar without a value or default", "default = 2.0\n", "",
     "visible_cases[0].scalars: missing value for scalar 'alpha' (it has no default)"},
    {"integer scalar given a fraction", "dtype = \"f32\"\ndefault = 2.0",
     "dtype = \"i32\"\ndefault = 2.5", "scalars[0].default: must be an integer for i32"},
    {"positions on a float tensor", "generator = \"randn\", mean = 0.0, std = 1.0",
     "generator = \"positions\", max = 10",
     "tensors[1].values.generator: 'positions' needs an i32 or i64 tensor, this one is bf16"},
    {"zipf ids on a floating tensor", "generator = \"randn\", mean = 0.0, std = 1.0",
     "generator = \"zipf\", max = 1000",
     "tensors[1].values.generator: 'zipf' needs an i32 or i64 tensor, this one is bf16"},
    {"zipf without max",
     "dtype = \"bf16\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { generator = "
     "\"randn\", mean = 0.0, std = 1.0 }",
     "dtype = \"i64\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { generator = \"zipf\", skew = "
     "1.0 }",
     "tensors[1].values.max: missing (an integer is required)"},
    {"zipf with a max of zero",
     "dtype = \"bf16\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { "
     "generator = \"randn\", mean = 0.0, std = 1.0 }",
     "dtype = \"i64\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { generator = \"zipf\", max = 0 "
     "}",
     "tensors[1].values.max: must be in [1, 2^53], got 0"},
    {"zipf ids past the i32 range",
     "dtype = \"bf16\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = "
     "{ generator = \"randn\", mean = 0.0, std = 1.0 }",
     "dtype = \"i32\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { generator = \"zipf\", max = "
     "3000000000 }",
     "tensors[1].values.max: must be in [1, 2^31], got 3000000000"},
    {"zipf with a skew past 4",
     "dtype = \"bf16\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { "
     "generator = \"randn\", mean = 0.0, std = 1.0 }",
     "dtype = \"i64\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { generator = \"zipf\", max = "
     "1000, skew = 4.5 }",
     "tensors[1].values.skew: must be in [0, 4], got 4.5"},
    {"zipf with an unknown key",
     "dtype = \"bf16\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { "
     "generator = \"randn\", mean = 0.0, std = 1.0 }",
     "dtype = \"i64\"\nshape = [\"n\", 4]\nrole = \"in\"\nvalues = { generator = \"zipf\", max = "
     "1000, alpha = 1.0 }",
     "tensors[1].values.alpha: unknown key (known: generator, note, max, skew)"},
    {"captured file that does not exist", "generator = \"randn\", mean = 0.0, std = 1.0",
     "generator = \"captured\", file = \"cap.safetensors\", tensor = \"x\"",
     "tensors[1].values.file: captured values file 'cap.safetensors' does not exist (looked at "
     "tasks/llm/toy/cap.safetensors)"},
    {"wrong value type", "title = \"Toy\"", "title = 3", "title: must be a string, got integer"},
    {"TOML syntax error", "title = \"Toy\"", "title = \"Toy", ":4:", true},
};

// A [parity] table for the toy task; each row of kBadParity breaks it in one place. It goes
// before [reference], where a row may also replace it with a plain key.
constexpr const char* kParity = R"toml([parity]
module = "parity.py"

[[parity.anchors]]
name = "PyTorch"
kind = "composite"
function = "scale"
description = "PyTorch eager and torch.compile of the composite"
)toml";

constexpr const char* kKernelAnchor = R"toml(
[[parity.anchors]]
name = "Library kernel"
kind = "kernel"
function = "library_scale"
description = "a named library kernel"
)toml";

// The toy manifest with `parity` (a [parity] table, or any text) before its [reference].
std::string with_parity(const std::string& parity) {
  return replaced(kValid, "[reference]\n", parity + "\n[reference]\n");
}

const BadManifest kBadParity[] = {
    {"parity that is not a table", kParity, "parity = \"parity.py\"\n",
     "parity: must be a table, got string"},
    {"unknown parity key", "module = \"parity.py\"", "module = \"parity.py\"\ntimeout = 3",
     "parity.timeout: unknown key (known: module, prepare, check, canonical, anchors)"},
    {"parity without a module", "module = \"parity.py\"\n", "",
     "parity.module: missing (a string is required)"},
    {"parity module that does not exist", "module = \"parity.py\"", "module = \"anchors.py\"",
     "parity.module: parity module 'anchors.py' does not exist (looked at "
     "tasks/llm/toy/anchors.py)"},
    {"parity module outside the task folder", "module = \"parity.py\"",
     "module = \"../rms_norm/parity.py\"",
     "parity.module: must be a .py file in the task folder (e.g. \"parity.py\"), got "
     "'../rms_norm/parity.py'"},
    {"parity module that is not Python", "module = \"parity.py\"", "module = \"parity.cu\"",
     "parity.module: must be a .py file in the task folder (e.g. \"parity.py\"), got "
     "'parity.cu'"},
    {"parity without anchors", kParity, "[parity]\nmodule = \"parity.py\"\n",
     "parity.anchors: missing (an array is required)"},
    {"parity with an empty anchor list", kParity,
     "[parity]\nmodule = \"parity.py\"\nanchors = []\n",
     "parity.anchors: at least one anchor is required"},
    {"unknown anchor key", "kind = \"composite\"", "kind = \"composite\"\nmode = \"max-autotune\"",
     "parity.anchors[0].mode: unknown key (known: name, description, kind, function)"},
    {"unknown anchor kind", "kind = \"composite\"", "kind = \"fused\"",
     "parity.anchors[0].kind: unknown kind 'fused' (known: composite, kernel)"},
    {"anchor without a kind", "kind = \"composite\"\n", "",
     "parity.anchors[0].kind: missing (a string is required)"},
    {"anchor function that is not a name", "function = \"scale\"", "function = \"scale-op\"",
     "parity.anchors[0].function: 'scale-op' is not a function name ([A-Za-z_][A-Za-z0-9_]*)"},
    {"anchor without a function", "function = \"scale\"\n", "",
     "parity.anchors[0].function: missing (a string is required)"},
    {"anchor without a description",
     "description = \"PyTorch eager and torch.compile of the composite\"\n", "",
     "parity.anchors[0].description: missing (a string is required)"},
    {"anchor with an empty name", "name = \"PyTorch\"", "name = \"\"",
     "parity.anchors[0].name: must not be empty"},
    {"canonical that is not a name", "module = \"parity.py\"",
     "module = \"parity.py\"\ncanonical = \"sort rows\"",
     "parity.canonical: 'sort rows' is not a function name ([A-Za-z_][A-Za-z0-9_]*)"},
    {"canonical without a kernel anchor", "module = \"parity.py\"",
     "module = \"parity.py\"\ncanonical = \"rows_sorted\"",
     "parity.canonical: only a \"kernel\" anchor's output is put in the check's order: this "
     "table has none"},
    {"prepare that is not a name", "module = \"parity.py\"",
     "module = \"parity.py\"\nprepare = \"gather contexts\"",
     "parity.prepare: 'gather contexts' is not a function name ([A-Za-z_][A-Za-z0-9_]*)"},
    {"two composite anchors", "description = \"PyTorch eager and torch.compile of the composite\"",
     "description = \"eager\"\n\n[[parity.anchors]]\nname = \"PyTorch again\"\nkind = "
     "\"composite\"\nfunction = \"scale\"\ndescription = \"the same composite\"",
     "parity.anchors: at most one anchor of kind \"composite\" (got 2)"},
    {"kernel anchor without a check", "kind = \"composite\"", "kind = \"kernel\"",
     "parity.check: missing: a \"kernel\" anchor's output is held to the check's before it is "
     "timed (a function name)"},
    {"duplicate anchor name", "module = \"parity.py\"",
     "module = \"parity.py\"\ncheck = \"exact\"\n\n[[parity.anchors]]\nname = \"PyTorch\"\n"
     "kind = \"kernel\"\nfunction = \"library_scale\"\ndescription = \"a kernel\"",
     "parity.anchors[1].name: duplicate anchor name 'PyTorch' (also parity.anchors[0])"},
};

// Loads `manifest` as the toy task (with tasks/llm/toy/parity.py present) and checks that the
// errors hold the row's line.
void check_bad_manifest(const BadManifest& row, const std::string& manifest) {
  const std::string problem = row.problem;
  CAPTURE(problem);
  ScratchHome home;
  home.write("tasks/llm/toy/parity.py", "def scale(torch, t, s, sym):\n    pass\n");
  home.write(kFile, manifest);
  const auto errors = load_errors(home);
  REQUIRE_MESSAGE(!errors.empty(), "loaded although: " << row.problem);
  const std::string expected =
      std::string(row.prefix && row.expected[0] == ':' ? "" : ": ") + row.expected;
  const std::string line_start = std::string(kFile) + expected;
  const bool found = std::any_of(errors.begin(), errors.end(), [&](const std::string& line) {
    return row.prefix ? line.rfind(line_start, 0) == 0 : line == line_start;
  });
  CHECK_MESSAGE(found, "expected:\n  " << line_start << "\ngot:\n" << joined(errors));
}

}  // namespace

TEST_CASE("validation: the unbroken toy manifest loads") {
  ScratchHome home;
  home.write(kFile, kValid);
  auto loaded = Registry::load(home.root());
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded.ok());
  const Task* task = loaded->find("llm/toy");
  REQUIRE(task != nullptr);
  CHECK(task->cases.size() == 2);
  CHECK(task->tensors[0].tolerance->atol == doctest::Approx(1e-5));  // the f32 default
  CHECK(task->cases[0].scalars.at("alpha") == doctest::Approx(2.0));
  CHECK(task->promises.empty());
  // A promise every case keeps loads, and says which symbols break it.
  home.write(kFile, replaced(kValid, "flops = \"n\"\n",
                             "flops = \"n\"\n\n[[promises]]\nholds = \"n >= 16\"\ntext = \"n is at "
                             "least 16\"\n"));
  auto promised = Registry::load(home.root());
  REQUIRE_MESSAGE(promised.ok(), promised.error().message);
  const auto& promises = promised->find("llm/toy")->promises;
  REQUIRE(promises.size() == 1);
  CHECK_FALSE(broken_promise(promises, {{"n", 16}}).has_value());
  CHECK(broken_promise(promises, {{"n", 15}}) == "n is at least 16");
  CHECK(broken_promise(promises, {}) == "n is at least 16");  // cannot be evaluated: broken
}

TEST_CASE("validation: each broken manifest gives its exact message with file and key") {
  for (const auto& row : kBadManifests) check_bad_manifest(row, replaced(kValid, row.from, row.to));
}

TEST_CASE("validation: a manifest without [parity] loads, with no anchors") {
  ScratchHome home;
  home.write(kFile, kValid);
  auto loaded = Registry::load(home.root());
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded.ok());
  CHECK_FALSE(loaded->find("llm/toy")->parity.has_value());
}

TEST_CASE("validation: a [parity] table loads with its module resolved in the task folder") {
  ScratchHome home;
  home.write("tasks/llm/toy/parity.py", "def scale(torch, t, s, sym):\n    pass\n");
  home.write(kFile, with_parity(replaced(kParity, "module = \"parity.py\"",
                                         "module = \"parity.py\"\nprepare = \"gather\"\n"
                                         "check = \"exact\"") +
                                kKernelAnchor));
  auto loaded = Registry::load(home.root());
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded.ok());
  const auto& parity = loaded->find("llm/toy")->parity;
  REQUIRE(parity.has_value());
  CHECK(parity->module == "parity.py");
  CHECK(fs::equivalent(parity->module_path, home.root() / "tasks/llm/toy/parity.py"));
  CHECK(parity->prepare == "gather");
  CHECK(parity->check == "exact");
  REQUIRE(parity->anchors.size() == 2);
  CHECK(parity->anchors[0].name == "PyTorch");
  CHECK(parity->anchors[0].kind == ParityKind::kComposite);
  CHECK(parity->anchors[0].function == "scale");
  CHECK(parity->anchors[0].description == "PyTorch eager and torch.compile of the composite");
  CHECK(parity->anchors[1].name == "Library kernel");
  CHECK(parity->anchors[1].kind == ParityKind::kKernel);
  CHECK(parity->anchors[1].function == "library_scale");
  CHECK(parity_kind_name(ParityKind::kKernel) == "kernel");
  CHECK(parity_kind_from_name("composite") == ParityKind::kComposite);
  CHECK_FALSE(parity_kind_from_name("fused").has_value());
}

TEST_CASE("validation: each broken [parity] table gives its exact message with file and key") {
  for (const auto& row : kBadParity) {
    check_bad_manifest(row, with_parity(replaced(kParity, row.from, row.to)));
  }
}

TEST_CASE("validation: every problem is reported, not just the first") {
  ScratchHome home;
  std::string text = replaced(kValid, "dtype = \"bf16\"", "dtype = \"bf17\"");
  text = replaced(text, "weight = 1.0", "weight = 0.0");
  text = replaced(text, "flops = \"n\"", "flops = \"q\"");
  home.write(kFile, text);
  home.write("tasks/llm/other/task.toml",
             replaced(replaced(kValid, "id = \"llm/toy\"", "id = \"llm/other\""), "role = \"out\"",
                      "role = \"sideways\""));
  const auto errors = load_errors(home);
  CHECK_MESSAGE(errors.size() == 4, joined(errors));
  const auto has = [&](const std::string& line) {
    return std::find(errors.begin(), errors.end(), line) != errors.end();
  };
  CHECK(
      has("tasks/llm/other/task.toml: tensors[0].role: unknown role 'sideways' (known: in, "
          "out, inout)"));
  CHECK(has("tasks/llm/toy/task.toml: visible_cases[0].weight: must be positive, got 0"));
  CHECK(has("tasks/llm/toy/task.toml: roofline.flops: unknown symbol 'q' (declared: n)"));
}

TEST_CASE("validation: two manifests declaring one id are reported as a duplicate") {
  ScratchHome home;
  home.write(kFile, kValid);
  home.write("tasks/llm/toy_copy/task.toml", kValid);
  const auto errors = load_errors(home);
  const auto has = [&](const std::string& line) {
    return std::find(errors.begin(), errors.end(), line) != errors.end();
  };
  CHECK_MESSAGE(has("tasks/llm/toy_copy/task.toml: id: duplicate id 'llm/toy' (also in "
                    "tasks/llm/toy/task.toml)"),
                joined(errors));
  CHECK(
      has("tasks/llm/toy_copy/task.toml: id: 'llm/toy' does not match the folder (expected "
          "'llm/toy_copy')"));
}

TEST_CASE("validation: a tasks folder without manifests is an error") {
  ScratchHome home;
  fs::create_directories(home.root() / "tasks");
  const auto errors = load_errors(home);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("no task.toml found") != std::string::npos);
}

// A safetensors file holding one bf16 tensor of `count` zero elements named `name`.
std::string safetensors_with(const std::string& name, std::size_t count) {
  std::string header = "{\"" + name + "\": {\"dtype\": \"BF16\", \"shape\": [" +
                       std::to_string(count) + "], \"data_offsets\": [0, " +
                       std::to_string(2 * count) + "]}}";
  while (header.size() % 8 != 0) header += ' ';
  std::string file(8, '\0');
  std::uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  return file + header + std::string(2 * count, '\0');
}

TEST_CASE("validation: a captured file that exists is accepted and resolved") {
  ScratchHome home;
  // Case "other" has n = 33, and x is [n, 4] bf16.
  home.write("tasks/llm/toy/captured/x.safetensors", safetensors_with("layer0.x", 33 * 4));
  home.write(kFile, replaced(kValid, "symbols = { n = 33 }",
                             "symbols = { n = 33 }\nvalues = { x = { generator = \"captured\", "
                             "file = \"captured/x.safetensors\", tensor = \"layer0.x\", "
                             "note = \"toy run\" } }"));
  auto loaded = Registry::load(home.root());
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded.ok());
  const Case* c = loaded->find("llm/toy")->find_case("other");
  REQUIRE(c != nullptr);
  const auto& spec = c->values.at("x");
  CHECK(spec.kind == GeneratorKind::kCaptured);
  CHECK(spec.tensor == "layer0.x");
  CHECK(fs::equivalent(spec.file_path, home.root() / "tasks/llm/toy/captured/x.safetensors"));
  CHECK(describe(spec) == "captured(captured/x.safetensors#layer0.x): toy run");
  // The visible case keeps the tensor's own generator.
  CHECK(loaded->find("llm/toy")->find_case("small")->values.at("x").kind == GeneratorKind::kRandn);
}

TEST_CASE("validation: captured values that are missing or the wrong size are refused at load") {
  const std::string values =
      "symbols = { n = 33 }\nvalues = { x = { generator = \"captured\", "
      "file = \"captured/x.safetensors\", tensor = \"layer0.x\" } }";
  {
    ScratchHome home;
    home.write("tasks/llm/toy/captured/x.safetensors", safetensors_with("layer0.x", 32 * 4));
    home.write(kFile, replaced(kValid, "symbols = { n = 33 }", values));
    const auto errors = load_errors(home);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] ==
          "tasks/llm/toy/task.toml: case other: values.x: captured tensor 'layer0.x' has 128 "
          "elements, the case's shape 132");
  }
  {
    ScratchHome home;
    home.write("tasks/llm/toy/captured/x.safetensors", safetensors_with("layer1.x", 33 * 4));
    home.write(kFile, replaced(kValid, "symbols = { n = 33 }", values));
    const auto errors = load_errors(home);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] ==
          "tasks/llm/toy/task.toml: case other: values.x: captured file captured/x.safetensors "
          "has no tensor 'layer0.x'");
  }
}
