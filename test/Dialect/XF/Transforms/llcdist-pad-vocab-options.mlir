// Bad values of llcdist-pad-vocab's multiple besides 0
// (llcdist-pad-vocab.mlir): negative, and not a number.
//
// RUN: not llc-dist-opt %s -split-input-file -llcdist-pad-vocab="multiple=-8" 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: error: llcdist-pad-vocab: multiple must be >= 1, got -8
// RUN: not llc-dist-opt %s -split-input-file -llcdist-pad-vocab="multiple=eight" 2>&1 | FileCheck %s --check-prefix=TYPE
// TYPE: for the --multiple option: 'eight' value invalid for long argument!
module {
}
