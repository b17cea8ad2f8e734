//===- LayeringCheck.cpp - an empty program for the link-layering check ---===//
//
// lib/CMakeLists.txt links each compiler library whole into this program with
// only the libraries it declares: a symbol no declared dependency defines
// fails that link (see "Libraries" in docs/architecture.md).
//
//===----------------------------------------------------------------------===//
int main() { return 0; }
