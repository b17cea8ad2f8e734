// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s

// Buffers are placed in order at 64-byte-aligned offsets; the arena is their sum.
// plan.memory: exact tensor bytes per kind, and the alignment's 84 bytes.
// 10 f32 = 40 bytes -> next at 64; 16 i32 = 64 bytes -> next at 128; 1 f32 -> 192.
// CHECK: plan.program @stage0 attributes {arena_bytes = 192 : i64, plan.memory = {input = 64 : i64, metric = 4 : i64, padding = 84 : i64, param = 40 : i64, peak_activations = 0 : i64, peak_communication = 0 : i64, peak_workspace = 0 : i64, transient_live_peak = 0 : i64, transient_peak = 0 : i64}}
// CHECK-NEXT: plan.buffer @b0 : tensor<10xf32> {kind = "param", name = "a", offset = 0 : i64}
// CHECK-NEXT: plan.buffer @b1 : tensor<4x4xi32> {kind = "input", name = "b", offset = 64 : i64}
// CHECK-NEXT: plan.buffer @b2 : tensor<1xf32> {kind = "metric", name = "loss", offset = 128 : i64}
plan.program @stage0 {
  plan.buffer @b0 : tensor<10xf32> {kind = "param", name = "a"}
  plan.buffer @b1 : tensor<4x4xi32> {kind = "input", name = "b"}
  plan.buffer @b2 : tensor<1xf32> {kind = "metric", name = "loss"}
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=REUSE

// Liveness: @a is dead after the second kernel, so @c (first used by the
// third) takes its bytes; @b is live across both and keeps its own. The
// parameter is placed first, for the whole step. Arena: 64 (param) +
// 2 × 64 (the two live activations at the peak).
// REUSE: plan.program @reuse attributes {arena_bytes = 192 : i64, plan.memory = {padding = 48 : i64, param = 16 : i64, peak_activations = 128 : i64, peak_communication = 0 : i64, peak_workspace = 0 : i64, transient_live_peak = 128 : i64, transient_peak = 128 : i64}}
// REUSE-NEXT: plan.buffer @w : tensor<4xf32> {kind = "param", name = "w", offset = 0 : i64}
// REUSE-NEXT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 64 : i64}
// REUSE-NEXT: plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", offset = 128 : i64}
// REUSE-NEXT: plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c", offset = 64 : i64}
plan.program @reuse {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c"}
  plan.subroutine @s {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    plan.kernel "add" {a = @a, b = @w, y = @b} {n = 4 : i64}
    plan.kernel "copy" {x = @b, y = @c} {n = 4 : i64}
    plan.kernel "add" {a = @c, b = @b, y = @w} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @s
  }
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=SEGMENTS

// Segments: @a is overwritten at the start of each run of @f and dead after
// it, so between the two runs its bytes are free and @b (used only by @g,
// in between) takes them: one live activation at a time. (A single
// first-to-last interval would keep @a for the whole step and give @b bytes
// of its own: 192.)
// SEGMENTS: plan.program @segments attributes {arena_bytes = 128 : i64, plan.memory = {padding = 48 : i64, param = 16 : i64, peak_activations = 64 : i64, peak_communication = 0 : i64, peak_workspace = 0 : i64, transient_live_peak = 64 : i64, transient_peak = 64 : i64}}
// SEGMENTS-NEXT: plan.buffer @w : tensor<4xf32> {kind = "param", name = "w", offset = 0 : i64}
// SEGMENTS-NEXT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 64 : i64}
// SEGMENTS-NEXT: plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", offset = 64 : i64}
plan.program @segments {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.subroutine @f {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    plan.kernel "accumulate" {x = @a, y = @w} {n = 4 : i64}
  }
  plan.subroutine @g {
    plan.kernel "copy" {x = @w, y = @b} {n = 4 : i64}
    plan.kernel "accumulate" {x = @b, y = @w} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @f
    plan.action @g
    plan.action @f
  }
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=ASYNC

// Asynchronous plans: a buffer of an in-flight op stays live through its
// token's wait. @a's last use is the started send, but the send may read it
// until the wait, so @b (written in between) gets bytes of its own; @c,
// written after the wait, reuses @a's.
// ASYNC: plan.program @in_flight attributes {arena_bytes = 192 : i64, plan.memory = {padding = 48 : i64, param = 16 : i64, peak_activations = 128 : i64, peak_communication = 0 : i64, peak_workspace = 0 : i64, transient_live_peak = 128 : i64, transient_peak = 128 : i64}, queues = ["compute", "comm"]}
// ASYNC-NEXT: plan.buffer @w : tensor<4xf32> {kind = "param", name = "w", offset = 0 : i64}
// ASYNC-NEXT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 64 : i64}
// ASYNC-NEXT: plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", offset = 128 : i64}
// ASYNC-NEXT: plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c", offset = 64 : i64}
plan.program @in_flight attributes {queues = ["compute", "comm"]} {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c"}
  plan.subroutine @s {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    plan.kernel "send" {x = @a} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {queue = "comm", token = 0 : i64}
    plan.kernel "copy" {x = @w, y = @b} {n = 4 : i64}
    plan.kernel "accumulate" {x = @b, y = @w} {n = 4 : i64}
    plan.kernel "wait" {} {} {token = 0 : i64}
    plan.kernel "copy" {x = @w, y = @c} {n = 4 : i64}
    plan.kernel "accumulate" {x = @c, y = @w} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @s
  }
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=SYNC

// The same kernels with a synchronous send: @a is dead after it and @b
// takes its bytes.
// SYNC: plan.program @synchronous attributes {arena_bytes = 128 : i64
// SYNC-NEXT: plan.buffer @w : tensor<4xf32> {kind = "param", name = "w", offset = 0 : i64}
// SYNC-NEXT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 64 : i64}
// SYNC-NEXT: plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", offset = 64 : i64}
// SYNC-NEXT: plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c", offset = 64 : i64}
plan.program @synchronous {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c"}
  plan.subroutine @s {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    plan.kernel "send" {x = @a} {axis = "pp", peer = 1 : i64, tag = 0 : i64}
    plan.kernel "copy" {x = @w, y = @b} {n = 4 : i64}
    plan.kernel "accumulate" {x = @b, y = @w} {n = 4 : i64}
    plan.kernel "copy" {x = @w, y = @c} {n = 4 : i64}
    plan.kernel "accumulate" {x = @c, y = @w} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @s
  }
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=SLOTS

// Microbatch slots: @a has an instance per slot, and the action's slot says
// which one its subroutine's kernels use. Two microbatches in flight (f f g
// g): instance 0 lives from the first f to the first g, instance 1 from the
// second f to the second g, so they get bytes of their own (192, 256); the
// unslotted @t (one instance, live within each g) goes above both. The
// slotted input's two instances lie side by side among the persistent
// buffers (64, 128), and its kind counts both.
// SLOTS: plan.program @slots attributes {arena_bytes = 384 : i64, plan.memory = {input = 32 : i64, padding = 144 : i64, param = 16 : i64, peak_activations = 192 : i64, peak_communication = 0 : i64, peak_workspace = 0 : i64, transient_live_peak = 192 : i64, transient_peak = 192 : i64}}
// SLOTS-NEXT: plan.buffer @w : tensor<4xf32> {kind = "param", name = "w", offset = 0 : i64}
// SLOTS-NEXT: plan.buffer @i : tensor<4xf32> {kind = "input", name = "i", offset = 64 : i64, slot_offsets = array<i64: 64, 128>, slots = 2 : i64}
// SLOTS-NEXT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 192 : i64, slot_offsets = array<i64: 192, 256>, slots = 2 : i64}
// SLOTS-NEXT: plan.buffer @t : tensor<4xf32> {kind = "activation", name = "t", offset = 320 : i64}
plan.program @slots {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @i : tensor<4xf32> {kind = "input", name = "i", slots = 2 : i64}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", slots = 2 : i64}
  plan.buffer @t : tensor<4xf32> {kind = "activation", name = "t"}
  plan.subroutine @f {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
  }
  plan.subroutine @g {
    plan.kernel "add" {a = @a, b = @w, y = @t} {n = 4 : i64}
    plan.kernel "copy" {x = @t, y = @w} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @f
    plan.action @f {slot = 1 : i64}
    plan.action @g
    plan.action @g {slot = 1 : i64}
  }
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=ASYNC-SLOT

// An in-flight op of a slotted action keeps its slot's instance live: the
// send started in slot 1 reads instance 1 of @a until the wait, so @b
// (written in between) gets bytes of its own; instance 0, first written
// after the wait, reuses instance 1's.
// ASYNC-SLOT: plan.program @in_flight_slot attributes {arena_bytes = 192 : i64
// ASYNC-SLOT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 64 : i64, slot_offsets = array<i64: 64, 64>, slots = 2 : i64}
// ASYNC-SLOT-NEXT: plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", offset = 128 : i64}
plan.program @in_flight_slot attributes {queues = ["compute", "comm"]} {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", slots = 2 : i64}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.subroutine @f {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    plan.kernel "send" {x = @a} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {queue = "comm", token = 0 : i64}
  }
  plan.subroutine @g {
    plan.kernel "copy" {x = @w, y = @b} {n = 4 : i64}
    plan.kernel "accumulate" {x = @b, y = @w} {n = 4 : i64}
  }
  plan.subroutine @done {
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @f microbatch 0 {slot = 1 : i64}
    plan.action @g
    plan.action @done
    plan.action @f microbatch 1
    plan.action @done
  }
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=BLOCKS

// A pipeline chunk's slots by pattern (actions of chunk 0, f f g g): @a and
// @b, written in f and read in g, go in one slot block laid out from slot 0's
// lifetimes (@a at 0, @b at 64 in it); slot 0's block lives over kernels
// 0-4, slot 1's over 2-6, so they take 128 bytes each (bases 64, 192). @s
// lives only within each g: one instance for both slots (320). Every
// instance offset is the block base plus the buffer's place in the block,
// so @a and @b move alike from slot to slot (the plan's one "slot_deltas"
// row for the block). The arena is the live peak (5 × 64 bytes at kernel 4).
// BLOCKS: plan.program @blocks attributes {arena_bytes = 384 : i64, plan.memory = {padding = 48 : i64, param = 16 : i64, peak_activations = 256 : i64, peak_communication = 0 : i64, peak_workspace = 64 : i64, transient_live_peak = 320 : i64, transient_peak = 320 : i64}}
// BLOCKS-NEXT: plan.buffer @w : tensor<4xf32> {kind = "param", name = "w", offset = 0 : i64}
// BLOCKS-NEXT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 64 : i64, slot_offsets = array<i64: 64, 192>, slots = 2 : i64}
// BLOCKS-NEXT: plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", offset = 128 : i64, slot_offsets = array<i64: 128, 256>, slots = 2 : i64}
// BLOCKS-NEXT: plan.buffer @s : tensor<4xf32> {kind = "scratch", name = "s", offset = 320 : i64, slot_offsets = array<i64: 320, 320>, slots = 2 : i64}
plan.program @blocks {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", slots = 2 : i64}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", slots = 2 : i64}
  plan.buffer @s : tensor<4xf32> {kind = "scratch", name = "s", slots = 2 : i64}
  plan.subroutine @f {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    plan.kernel "copy" {x = @w, y = @b} {n = 4 : i64}
  }
  plan.subroutine @g {
    plan.kernel "add" {a = @a, b = @b, y = @s} {n = 4 : i64}
    plan.kernel "copy" {x = @s, y = @w} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @f microbatch 0 {pipeline.chunk = 0 : i64}
    plan.action @f microbatch 1 {pipeline.chunk = 0 : i64, slot = 1 : i64}
    plan.action @g microbatch 0 {pipeline.chunk = 0 : i64}
    plan.action @g microbatch 1 {pipeline.chunk = 0 : i64, slot = 1 : i64}
  }
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=EXACT

// Where blocks would cost more than 2% over the live peak the per-instance
// layout is tried too and wins: @s, live in f between the two writes, makes
// slot 0's block start at kernel 1 above it (blocks: 320 bytes), while
// per instance @b of slot 0 takes @s's bytes once @s is dead (256, the
// live peak; blocks would make the arena 384).
// EXACT: plan.program @exact attributes {arena_bytes = 320 : i64, plan.memory = {padding = 48 : i64, param = 16 : i64, peak_activations = 192 : i64, peak_communication = 0 : i64, peak_workspace = 64 : i64, transient_live_peak = 256 : i64, transient_peak = 256 : i64}}
// EXACT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 128 : i64, slot_offsets = array<i64: 128, 256>, slots = 2 : i64}
// EXACT-NEXT: plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", offset = 64 : i64, slot_offsets = array<i64: 64, 192>, slots = 2 : i64}
plan.program @exact {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", slots = 2 : i64}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b", slots = 2 : i64}
  plan.buffer @s : tensor<4xf32> {kind = "scratch", name = "s", slots = 2 : i64}
  plan.subroutine @f {
    plan.kernel "copy" {x = @w, y = @s} {n = 4 : i64}
    plan.kernel "copy" {x = @s, y = @a} {n = 4 : i64}
    plan.kernel "copy" {x = @w, y = @b} {n = 4 : i64}
  }
  plan.subroutine @g {
    plan.kernel "add" {a = @a, b = @b, y = @w} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @f microbatch 0 {pipeline.chunk = 0 : i64}
    plan.action @f microbatch 1 {pipeline.chunk = 0 : i64, slot = 1 : i64}
    plan.action @g microbatch 0 {pipeline.chunk = 0 : i64}
    plan.action @g microbatch 1 {pipeline.chunk = 0 : i64, slot = 1 : i64}
  }
}

// -----
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-memory))" | FileCheck %s --check-prefix=REPLAY

// Each subroutine is decoded once and replayed per action with its slot.
// Kernels in step order: f (slot 0) 0-2, f (slot 1) 3-5, b (slot 0) 6-7,
// b (slot 1) 8-9. `add` reads @a and writes it back (one buffer in two
// roles: read, so no new segment): a#0 lives [0, 6], a#1 [3, 8]. Each f
// gathers into @g anew: [1, 2] and [4, 5]; @t: [6, 7] and [8, 9].
// Best fit in order of first use (a#0, g, a#1, t): a#0 at 64, g above it
// (128); a#1 avoids g's return at 4 (192); t takes the hole g leaves at 6
// (128). The live peak (192) is first reached at kernel 4: a#0, a#1 and
// the gathered @g (a communication buffer).
// REPLAY: plan.program @replay attributes {arena_bytes = 256 : i64, plan.memory = {padding = 48 : i64, param = 16 : i64, peak_activations = 128 : i64, peak_communication = 64 : i64, peak_workspace = 0 : i64, transient_live_peak = 192 : i64, transient_peak = 192 : i64}}
// REPLAY-NEXT: plan.buffer @w : tensor<4xf32> {kind = "param", name = "w", offset = 0 : i64}
// REPLAY-NEXT: plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 64 : i64, slot_offsets = array<i64: 64, 192>, slots = 2 : i64}
// REPLAY-NEXT: plan.buffer @g : tensor<4xf32> {kind = "activation", name = "g", offset = 128 : i64}
// REPLAY-NEXT: plan.buffer @t : tensor<4xf32> {kind = "scratch", name = "t", offset = 128 : i64}
plan.program @replay {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", slots = 2 : i64}
  plan.buffer @g : tensor<4xf32> {kind = "activation", name = "g"}
  plan.buffer @t : tensor<4xf32> {kind = "scratch", name = "t"}
  plan.subroutine @f {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    plan.kernel "all_gather" {x = @w, y = @g} {axis = "tp", inner = 4 : i64, outer = 1 : i64}
    plan.kernel "add" {a = @a, b = @g, y = @a} {n = 4 : i64}
  }
  plan.subroutine @b {
    plan.kernel "copy" {x = @a, y = @t} {n = 4 : i64}
    plan.kernel "accumulate" {x = @t, y = @w} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @f
    plan.action @f {slot = 1 : i64}
    plan.action @b
    plan.action @b {slot = 1 : i64}
  }
}
