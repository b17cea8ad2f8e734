//===- NestingDepth.cpp - the nesting bound on .mlir text -----------------===//
#include "llcdist/Support/NestingDepth.h"

using namespace llcdist;

std::string NestingError::describe(const std::string &file) const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) +
         ": nested deeper than " + std::to_string(limit) +
         " levels of ( ) [ ] { } < >: MLIR's parser recurses once per level "
         "and would overflow the stack; no IR llc-dist writes nests more than "
         "a few dozen levels (flatten the attribute or type, or check that the "
         "file is not corrupted)";
}

std::optional<NestingError> llcdist::checkNestingDepth(std::string_view text,
                                                       size_t limit) {
  size_t depth = 0, line = 1, col = 0;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    ++col;
    switch (c) {
    case '\n':
      ++line;
      col = 0;
      break;
    case '"':
      // A string literal: `\` escapes the next byte; MLIR's lexer ends a
      // string that reaches a newline with an error, so do we.
      for (++i; i < n && text[i] != '"' && text[i] != '\n'; ++i, ++col)
        if (text[i] == '\\' && i + 1 < n && text[i + 1] != '\n')
          ++i, ++col;
      if (i < n && text[i] == '\n') {
        ++line;
        col = 0;
      } else {
        ++col; // the closing quote
      }
      break;
    case '/':
      if (i + 1 < n && text[i + 1] == '/') // a comment, to the end of the line
        while (i + 1 < n && text[i + 1] != '\n')
          ++i;
      break;
    case '(':
    case '[':
    case '{':
    case '<':
      if (++depth > limit)
        return NestingError{line, col, limit};
      break;
    case '>':
      if (i > 0 && text[i - 1] == '-') // `->`
        break;
      if (i + 1 < n && text[i + 1] == '=') // `>=` (integer sets)
        break;
      [[fallthrough]];
    case ')':
    case ']':
    case '}':
      if (depth > 0)
        --depth;
      break;
    default:
      break;
    }
  }
  return std::nullopt;
}
