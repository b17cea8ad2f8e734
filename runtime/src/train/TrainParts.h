// Private pieces of the training driver (Train.h): parameter init/import/export (sharding-aware) and
// data sources.
#pragma once

#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include <functional>
#include <string>
#include <vector>

namespace llcdist::rt::train {

// Writes the initial value of every param placed in interp's program (its local shard on interp.rank())
// into that placement's buffer: from the manifest's init under `seed`, or from the safetensors file
// `initFrom` when it is not empty (see Train.h for the rules; the file must still hold every param of
// the plan). Sharded params init/slice by global index (params[].sharding); a ZeRO stage-3 param's
// buffer gets the rank's block of its shard (params[].zero).
Status initParams(const Manifest& manifest, Interpreter& interp, uint64_t seed, const std::string& initFrom);
// Writes every param as F32 to `path` (atomically): sharded params gathered from their shards (ZeRO-3
// params from the blocks of each shard); replicated params (and the replicas of each shard, or of each
// ZeRO-3 block of a shard) must be bitwise identical on every rank whose
// program holds a copy (tied params of pipeline plans: whichever program), else an error names the
// param, the first differing rank and element. ranks[r] runs rank r.
Status saveParams(const Manifest& manifest, const std::vector<Interpreter*>& ranks, const std::string& path);
// The same with rank r's param buffers read by read(r, param index, buffer id in r's program): ranks
// of other processes included (the caller fetches them). `world` ranks, r's program
// manifest.programOfRank(r); params are read in the manifest's order, each rank after rank.
using ParamRead = std::function<StatusOr<std::vector<float>>(int rank, int64_t param, int64_t buffer)>;
Status saveParams(const Manifest& manifest, int world, const ParamRead& read, const std::string& path);

// For each contiguous run of param `p`'s local shard on member `member` of its sharding axis:
// fn(localOffset, globalOffset, count) in elements. A replicated param is one run [0, numel).
void forEachShardRun(const ParamDesc& p, int64_t member, int64_t axisSize,
                     const std::function<void(int64_t, int64_t, int64_t)>& fn);

// The same for what a rank's value buffer holds when it is the ZeRO block `block` of `blocks` of that
// local shard (stage 3: the contiguous local elements [block·E/blocks, (block+1)·E/blocks), E the local
// numel): fn(bufferOffset, globalOffset, count). blocks = 1 is forEachShardRun.
void forEachHeldRun(const ParamDesc& p, int64_t member, int64_t axisSize, int64_t block, int64_t blocks,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn);

// Data: a factory of per-rank microbatch sources ("synthetic" or an llm.c token file, loaded and
// checked once); the source for data-parallel coordinate dpRank reads that rank's samples.
using DataSourceFactory = std::function<MicrobatchSource(int64_t dpRank)>;
StatusOr<DataSourceFactory> makeDataSources(const Manifest& manifest, const std::string& data, bool shuffle,
                                            uint64_t seed);

}  // namespace llcdist::rt::train
