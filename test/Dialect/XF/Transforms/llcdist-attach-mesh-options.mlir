// A bad value of each llcdist-attach-mesh option (llcdist-attach-mesh*.mlir
// cover the good ones and the bad rank order tp,tp,pp).
//
// RUN: not llc-dist-opt %s -split-input-file -llcdist-attach-mesh="dp=0" 2>&1 | FileCheck %s --check-prefix=DP
// DP: error: mesh degrees must be >= 1, got dp=0 tp=1 pp=1
// RUN: not llc-dist-opt %s -split-input-file -llcdist-attach-mesh="tp=-2" 2>&1 | FileCheck %s --check-prefix=TP
// TP: error: mesh degrees must be >= 1, got dp=1 tp=-2 pp=1
// RUN: not llc-dist-opt %s -split-input-file -llcdist-attach-mesh="pp=0" 2>&1 | FileCheck %s --check-prefix=PP
// PP: error: mesh degrees must be >= 1, got dp=1 tp=1 pp=0
// RUN: not llc-dist-opt %s -split-input-file -llcdist-attach-mesh="dp=two" 2>&1 | FileCheck %s --check-prefix=TYPE
// TYPE: for the --dp option: 'two' value invalid for long argument!
// RUN: not llc-dist-opt %s -split-input-file -llcdist-attach-mesh="rank-order=tp,dp" 2>&1 | FileCheck %s --check-prefix=SHORT
// SHORT: error: rank-order 'tp,dp' is not a permutation of dp, tp, pp
// RUN: not llc-dist-opt %s -split-input-file -llcdist-attach-mesh="rank-order=tp,dp,ep" 2>&1 | FileCheck %s --check-prefix=AXIS
// AXIS: error: rank-order 'tp,dp,ep' is not a permutation of dp, tp, pp
// RUN: not llc-dist-opt %s -split-input-file -llcdist-attach-mesh="rank-order=" 2>&1 | FileCheck %s --check-prefix=EMPTY
// EMPTY: error: rank-order '' is not a permutation of dp, tp, pp
module {
}
