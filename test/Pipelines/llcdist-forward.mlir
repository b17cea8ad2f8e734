// llcdist-forward's options are llcdist-attach-mesh's, with its defaults
// (the pipeline is printed before it runs; it then fails on this empty
// module, which has no model). test/tools/llc-dist/dump-ir.test checks that
// it reproduces llc-dist compile --emit xf.
//
// RUN: not llc-dist-opt %s --llcdist-forward --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=DEFAULT
// DEFAULT-LABEL: Pass Manager with 3 passes:
// DEFAULT-NEXT: builtin.module(
// DEFAULT-NEXT: cse,
// DEFAULT-NEXT: llcdist-attach-mesh{cp=1 dp=1 ep=1 pp=1 rank-order=tp,dp,pp tp=1},
// DEFAULT-NEXT: llcdist-model-stats
// DEFAULT-NEXT: )
// RUN: not llc-dist-opt %s --llcdist-forward="dp=2 tp=4 pp=8 rank-order=pp,dp,tp" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=MESH
// MESH-LABEL: Pass Manager with 3 passes:
// MESH: llcdist-attach-mesh{cp=1 dp=2 ep=1 pp=8 rank-order=pp,dp,tp tp=4},
//
// Bad values.
// RUN: not llc-dist-opt %s --llcdist-forward="tp=0" 2>&1 | FileCheck %s --check-prefix=TP
// TP: error: mesh degrees must be >= 1, got dp=1 tp=0 pp=1
// RUN: not llc-dist-opt %s --llcdist-forward="pp=x" 2>&1 | FileCheck %s --check-prefix=TYPE
// TYPE: for the --pp option: 'x' value invalid for long argument!
// RUN: not llc-dist-opt %s --llcdist-forward="mesh=2x2" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: no such option mesh
module {
}
