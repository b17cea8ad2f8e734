// RUN: llc-dist-opt %s --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s

// Buffers are placed in order at 64-byte-aligned offsets; the arena is their sum.
// 10 f32 = 40 bytes -> next at 64; 16 i32 = 64 bytes -> next at 128; 1 f32 -> 192.
// CHECK: plan.program @stage0 attributes {arena_bytes = 192 : i64}
// CHECK-NEXT: plan.buffer @b0 : tensor<10xf32> {kind = "param", name = "a", offset = 0 : i64}
// CHECK-NEXT: plan.buffer @b1 : tensor<4x4xi32> {kind = "input", name = "b", offset = 64 : i64}
// CHECK-NEXT: plan.buffer @b2 : tensor<1xf32> {kind = "metric", name = "loss", offset = 128 : i64}
plan.program @stage0 {
  plan.buffer @b0 : tensor<10xf32> {kind = "param", name = "a"}
  plan.buffer @b1 : tensor<4x4xi32> {kind = "input", name = "b"}
  plan.buffer @b2 : tensor<1xf32> {kind = "metric", name = "loss"}
}
