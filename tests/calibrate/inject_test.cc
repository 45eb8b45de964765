// Tests of validate --inject's parts that run without MPI: the fault
// grammar and its bounds, and the checkpoint store's commit rule (a
// checkpoint exists once every rank's shard is durable).
#include "calibrate/inject.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "calibrate/recovery.h"
#include "simulator/core/error.h"

namespace trainplan {
namespace {

TEST_CASE("Inject: the grammar and its bounds", "[calibrate][inject]") {
  const InjectSpec k = parse_inject("kill:rank=1,step=4", 2, 6);
  CHECK(k.kind == InjectSpec::Kind::kKill);
  CHECK(k.rank == 1);
  CHECK(k.step == 4);
  CHECK(k.recovery());
  const InjectSpec h = parse_inject("hang:step=6,rank=0", 2, 6);  // keys in any order
  CHECK(h.kind == InjectSpec::Kind::kHang);
  CHECK(h.step == 6);
  const InjectSpec s = parse_inject("slow:rank=0,factor=1.5", 2, 6);
  CHECK(s.kind == InjectSpec::Kind::kSlow);
  CHECK(s.factor == 1.5);
  CHECK_FALSE(s.recovery());
  const InjectSpec l = parse_inject("link:rank=1,factor=0.25", 2, 6);
  CHECK(l.kind == InjectSpec::Kind::kLink);
  CHECK(l.factor == 0.25);
  // Each bound: rank in [0, ranks), step in [1, steps], factor in (1, 100]
  // (slow) or (0, 1) (link).
  for (const char* bad : {"kill:rank=2,step=1", "kill:rank=-1,step=1", "kill:rank=0,step=0", "kill:rank=0,step=7",
                          "kill:rank=0.5,step=1", "slow:rank=0,factor=1", "slow:rank=0,factor=101", "slow:rank=0",
                          "kill:rank=0", "kill:rank=0,step=1,factor=2", "kill:rank=0,rank=1,step=1", "kill",
                          "crash:rank=0,step=1", "kill:rank=0,step=x", "kill:rank=0;step=1", "link:rank=0,factor=1",
                          "link:rank=0,factor=0", "link:rank=0,step=2"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_inject(bad, 2, 6), InputError);
  }
}

TEST_CASE("Recovery: a checkpoint is committed when every rank's shard is written", "[calibrate][inject]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("trainplan-inject-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string d = dir.string();
  const int64_t bytes = 3 * 1024 * 1024 + 17;  // not a multiple of the 8 MiB chunk or of a word
  CHECK(latest_committed_step(d, 2) == 0);
  for (int rank : {0, 1}) {
    write_shard(d, 2, rank, bytes);
    write_shard(d, 4, rank, bytes);
  }
  write_shard(d, 6, 0, bytes);  // rank 1 died before writing step 6
  CHECK(latest_committed_step(d, 2) == 4);
  CHECK(latest_committed_step(d, 1) == 6);
  CHECK(fs::file_size(d + "/ckpt/step-4/rank-1.bin") == static_cast<uintmax_t>(bytes));
  CHECK(load_shard(d, 4, 1, bytes) >= 0);
  // Another rank's shard, a short read or a flipped byte is refused.
  fs::copy_file(d + "/ckpt/step-4/rank-0.bin", d + "/ckpt/step-2/rank-1.bin", fs::copy_options::overwrite_existing);
  CHECK_THROWS_AS(load_shard(d, 2, 1, bytes), std::runtime_error);
  CHECK_THROWS_AS(load_shard(d, 4, 0, bytes + 8), std::runtime_error);
  {
    std::fstream f(d + "/ckpt/step-4/rank-1.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(bytes - 1);
    f.put('\x7f');
  }
  CHECK_THROWS_AS(load_shard(d, 4, 1, bytes), std::runtime_error);
  // The probe measures and leaves nothing behind.
  const StorageProbe p = probe_storage(d, 2, bytes);
  CHECK(p.write_bytes_per_s > 0);
  CHECK(p.read_bytes_per_s > 0);
  CHECK_FALSE(fs::exists(d + "/probe"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trainplan
