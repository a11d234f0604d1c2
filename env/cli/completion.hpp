// CUDA source out of an LLM completion, by the rules of the Python client's extract_source.
#pragma once

#include <string>
#include <string_view>

#include "core/result.hpp"
#include "core/value.hpp"

namespace crucible::env {

// Which candidate block `extract_source` takes when a completion holds several.
enum class SourceBlock { kLast, kFirst };

// The text of a completion, as clients/python/src/crucible_client/prompts.py completion_text
// reads it: a string is itself; a chat message ({"role", "content"}) is its content (a list of
// content parts is the concatenation of their "text"); a list of messages is the last message
// whose role is "assistant" (a message without a role counts as one), else the last message,
// else "". A content or part text that is not a string is taken as its JSON text. Errors:
// kInvalidArgument for anything else (a number, a boolean, null), naming the JSON type.
core::Result<std::string> completion_text(const core::Value& completion);

// The kernel source in a completion's text, by the Python client's extract_source rules:
//  - everything up to the last `</think>` (any case) is reasoning and is skipped;
//  - fenced blocks (``` or ~~~, at most 3 spaces before the fence, closed by a line of at
//    least as many of the same fence character; an unclosed last block runs to the end) tagged
//    cuda, cu, cpp, c++, cxx, cc, c, cuh, hpp or h (any case), or untagged, with a body that is
//    not blank, are the candidates; blocks in other languages are not;
//  - `which` picks the last (default) or the first candidate; its body, with leading and
//    trailing newlines removed, plus one newline, is the source;
//  - without any fenced block, a text that declares a `__global__` function or holds a
//    `// @launch` directive is taken whole (newlines trimmed the same way).
// Errors (kInvalidArgument), with the Python client's messages: "the completion's code blocks
// are not CUDA/C++ (python, untagged)" when there are fenced blocks but no candidate; "the
// completion holds no ```cuda code block and no kernel source" otherwise. Lines are split as
// Python's str.splitlines splits them; case folding and the whitespace of `\s` are those of
// ASCII plus the Unicode spaces Python's str.isspace knows. tests/eval/completion_cases.json
// holds the cases both implementations are held to.
core::Result<std::string> extract_source(std::string_view text,
                                         SourceBlock which = SourceBlock::kLast);

}  // namespace crucible::env
