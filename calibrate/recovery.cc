#include "calibrate/recovery.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace trainplan {

namespace fs = std::filesystem;

double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

std::string log_path(const std::string& dir, int attempt, int rank) {
  return dir + "/attempt-" + std::to_string(attempt) + ".rank-" + std::to_string(rank) + ".log";
}

std::string shard_path(const std::string& dir, int step, int rank) {
  return dir + "/ckpt/step-" + std::to_string(step) + "/rank-" + std::to_string(rank) + ".bin";
}

[[noreturn]] void sys_error(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

// The shard's content: 8-byte words step * 2^32 + rank * 2^16 + word index
// (mod 2^16), enough to tell one shard from another on reading.
void fill(std::vector<uint64_t>* chunk, int step, int rank, uint64_t first_word) {
  for (size_t i = 0; i < chunk->size(); ++i) {
    (*chunk)[i] = (static_cast<uint64_t>(step) << 32) + (static_cast<uint64_t>(rank) << 16) + ((first_word + i) & 0xffff);
  }
}

constexpr size_t kChunkWords = 1 << 20;  // 8 MiB per write(2)

void write_file(const std::string& path, int64_t bytes, int step, int rank) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) sys_error("cannot create", path);
  std::vector<uint64_t> chunk(kChunkWords);
  int64_t left = bytes;
  uint64_t word = 0;
  while (left > 0) {
    fill(&chunk, step, rank, word);
    const size_t n = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(kChunkWords * 8)));
    const char* p = reinterpret_cast<const char*>(chunk.data());
    size_t done = 0;
    while (done < n) {
      const ssize_t w = ::write(fd, p + done, n - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        ::close(fd);
        sys_error("cannot write", path);
      }
      done += static_cast<size_t>(w);
    }
    left -= static_cast<int64_t>(n);
    word += kChunkWords;
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    sys_error("cannot fsync", path);
  }
  ::close(fd);
}

// Reads `path` and checks `bytes` of the pattern; returns false if wrong.
bool read_file(const std::string& path, int64_t bytes, int step, int rank) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) sys_error("cannot open", path);
  std::vector<uint64_t> chunk(kChunkWords), want(kChunkWords);
  int64_t left = bytes;
  uint64_t word = 0;
  bool ok = true;
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(kChunkWords * 8)));
    char* p = reinterpret_cast<char*>(chunk.data());
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::read(fd, p + done, n - done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ::close(fd);
        return false;
      }
      done += static_cast<size_t>(r);
    }
    fill(&want, step, rank, word);
    if (std::memcmp(chunk.data(), want.data(), n) != 0) ok = false;
    left -= static_cast<int64_t>(n);
    word += kChunkWords;
  }
  char extra;
  if (::read(fd, &extra, 1) != 0) ok = false;
  ::close(fd);
  return ok;
}

struct Event {
  std::string name;
  double t = 0, value = 0;
};

std::vector<Event> read_log(const std::string& path) {
  std::vector<Event> events;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    Event e;
    if (ss >> e.name >> e.t >> e.value) events.push_back(e);
  }
  return events;
}

// Every rank's events of one attempt.
std::vector<std::vector<Event>> read_logs(const std::string& dir, int attempt, int ranks) {
  std::vector<std::vector<Event>> logs;
  for (int r = 0; r < ranks; ++r) logs.push_back(read_log(log_path(dir, attempt, r)));
  return logs;
}

// The first (or last) time `name` (with `value`, if >= 0) appears in a log.
double find(const std::vector<Event>& log, const std::string& name, double value = -1, bool last = false) {
  double t = -1;
  for (const Event& e : log) {
    if (e.name != name || (value >= 0 && e.value != value)) continue;
    t = e.t;
    if (!last) break;
  }
  return t;
}

// Over ranks, the latest (or earliest) time of an event; -1 if a rank lacks it.
double over_ranks(const std::vector<std::vector<Event>>& logs, const std::string& name, double value, bool latest) {
  double t = latest ? -1e300 : 1e300;
  for (const auto& log : logs) {
    const double x = find(log, name, value);
    if (x < 0) return -1;
    t = latest ? std::max(t, x) : std::min(t, x);
  }
  return t;
}

// The latest event any rank of the attempt logged (a heartbeat), other
// than the fault itself; -1 while some rank has not logged "ready" yet.
// The heartbeat watch starts once the job is up, as torchelastic's does
// after its rendezvous: launching the ranks (MPI start-up, loading the
// binary) is not a step, can take seconds on a loaded machine, and a launch
// that never finishes is caught by the attempt's time limit instead.
double last_heartbeat(const std::string& dir, int attempt, int ranks) {
  double t = 0;
  for (int r = 0; r < ranks; ++r) {
    bool ready = false;
    for (const Event& e : read_log(log_path(dir, attempt, r))) {
      if (e.name != "fault") t = std::max(t, e.t);
      ready = ready || e.name == "ready";
    }
    if (!ready) return -1;
  }
  return t;
}

// A rank that logged its pid and has exited (gone, or a zombie its
// launcher has not reaped yet): -1 if every rank that logged is alive.
int dead_rank(const std::string& dir, int attempt, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    for (const Event& e : read_log(log_path(dir, attempt, r))) {
      if (e.name != "pid") continue;
      std::ifstream stat("/proc/" + std::to_string(static_cast<long>(e.value)) + "/stat");
      std::string line;
      if (!std::getline(stat, line)) return r;
      // pid (comm) state ...: the state follows the last ')'.
      const size_t close = line.rfind(')');
      if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z' || line[close + 2] == 'X') {
        return r;
      }
    }
  }
  return -1;
}


struct Child {
  pid_t pid = -1;
  double spawned_at = 0;
};

Child spawn(const std::vector<std::string>& argv, const std::string& output) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own process group: killed as one
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  Child c;
  c.spawned_at = monotonic_s();
  const int rc = posix_spawnp(&c.pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    errno = rc;
    sys_error("cannot start", argv[0]);
  }
  return c;
}

// Kills the launcher's process group and every rank that logged its pid
// (a rank may have left the group), then reaps the launcher.
void kill_job(const Child& c, const std::string& dir, int attempt, int ranks) {
  ::kill(-c.pid, SIGKILL);
  for (const auto& log : read_logs(dir, attempt, ranks)) {
    for (const Event& e : log) {
      if (e.name == "pid" && e.value > 1) ::kill(static_cast<pid_t>(e.value), SIGKILL);
    }
  }
  int status = 0;
  ::waitpid(c.pid, &status, 0);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string tail_of(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

}  // namespace

RecoveryLog::RecoveryLog(const std::string& dir, int attempt, int rank) {
  const std::string path = log_path(dir, attempt, rank);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  if (fd_ < 0) sys_error("cannot create", path);
}

RecoveryLog::~RecoveryLog() {
  if (fd_ >= 0) ::close(fd_);
}

void RecoveryLog::event(const std::string& name, double value) {
  char line[160];
  const int n = std::snprintf(line, sizeof line, "%s %.9f %.17g\n", name.c_str(), monotonic_s(), value);
  if (n > 0 && ::write(fd_, line, static_cast<size_t>(n)) != n) {
    throw std::runtime_error("cannot write the recovery log: " + std::string(std::strerror(errno)));
  }
}

double write_shard(const std::string& dir, int step, int rank, int64_t bytes) {
  const double t0 = monotonic_s();
  const std::string path = shard_path(dir, step, rank);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) throw std::runtime_error("cannot create " + fs::path(path).parent_path().string() + ": " + ec.message());
  write_file(path + ".tmp", bytes, step, rank);
  if (::rename((path + ".tmp").c_str(), path.c_str()) != 0) sys_error("cannot rename", path + ".tmp");
  return monotonic_s() - t0;
}

namespace {

// Writes `bytes` of `buffer` to `path`, fsyncs and closes it.
void write_buffer(const std::string& path, const std::vector<uint64_t>& buffer, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) sys_error("cannot create", path);
  const char* p = reinterpret_cast<const char*>(buffer.data());
  int64_t done = 0;
  while (done < bytes) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(bytes - done, static_cast<int64_t>(kChunkWords * 8)));
    const ssize_t w = ::write(fd, p + done, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      sys_error("cannot write", path);
    }
    done += w;
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    sys_error("cannot fsync", path);
  }
  ::close(fd);
}

}  // namespace

AsyncShardWriter::AsyncShardWriter(std::string dir, int rank, int64_t bytes, std::function<void(int)> on_persisted)
    : dir_(std::move(dir)), rank_(rank), bytes_(bytes), on_persisted_(std::move(on_persisted)),
      buffer_(static_cast<size_t>((bytes + 7) / 8)) {}

AsyncShardWriter::~AsyncShardWriter() {
  if (worker_.joinable()) worker_.join();
}

void AsyncShardWriter::wait() {
  if (worker_.joinable()) worker_.join();
  if (!error_.empty()) throw std::runtime_error(error_);
}

double AsyncShardWriter::snapshot(int step) {
  const double t0 = monotonic_s();
  wait();
  // The copy: the shard's content into the host buffer, in the chunks the
  // file is written in.
  for (size_t first = 0; first < buffer_.size(); first += kChunkWords) {
    std::vector<uint64_t> chunk(std::min(kChunkWords, buffer_.size() - first));
    fill(&chunk, step, rank_, first);
    std::copy(chunk.begin(), chunk.end(), buffer_.begin() + static_cast<std::ptrdiff_t>(first));
  }
  const double blocked = monotonic_s() - t0;
  worker_ = std::thread([this, step] {
    try {
      const std::string path = shard_path(dir_, step, rank_);
      std::error_code ec;
      fs::create_directories(fs::path(path).parent_path(), ec);
      if (ec) throw std::runtime_error("cannot create " + fs::path(path).parent_path().string() + ": " + ec.message());
      write_buffer(path + ".tmp", buffer_, bytes_);
      if (::rename((path + ".tmp").c_str(), path.c_str()) != 0) sys_error("cannot rename", path + ".tmp");
      if (on_persisted_) on_persisted_(step);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  });
  return blocked;
}

double load_shard(const std::string& dir, int step, int rank, int64_t bytes) {
  const double t0 = monotonic_s();
  const std::string path = shard_path(dir, step, rank);
  if (!read_file(path, bytes, step, rank)) {
    throw std::runtime_error("checkpoint shard " + path + " is not the " + std::to_string(bytes) +
                             " bytes this rank wrote after step " + std::to_string(step));
  }
  return monotonic_s() - t0;
}

int latest_committed_step(const std::string& dir, int ranks) {
  int best = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir + "/ckpt", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    const int step = std::atoi(name.c_str() + 5);
    bool all = step > 0;
    for (int r = 0; r < ranks && all; ++r) all = fs::exists(shard_path(dir, step, r));
    if (all) best = std::max(best, step);
  }
  return best;
}

StorageProbe probe_storage(const std::string& dir, int ranks, int64_t bytes) {
  const std::string probe = dir + "/probe";
  StorageProbe p;
  const double total = static_cast<double>(ranks) * static_cast<double>(bytes);
  // One thread per rank, all at once, each round a new checkpoint folder of
  // new files, written, fsynced and renamed as the ranks' shards are.
  auto each_rank = [&](int round, bool write) {
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    const double t0 = monotonic_s();
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          if (write) {
            write_shard(probe, round, r, bytes);
          } else {
            load_shard(probe, round, r, bytes);
          }
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::string& e : errors) {
      if (!e.empty()) throw std::runtime_error(e);
    }
    return total / std::max(1e-9, monotonic_s() - t0);
  };
  // The median of kProbeRounds rounds: fsync times on a shared disk vary
  // by 2x from one write to the next.
  constexpr int kProbeRounds = 3;
  std::vector<double> w, r;
  for (int k = 1; k <= kProbeRounds; ++k) {
    w.push_back(each_rank(k, true));
    r.push_back(each_rank(k, false));
  }
  std::sort(w.begin(), w.end());
  std::sort(r.begin(), r.end());
  p.write_bytes_per_s = w[w.size() / 2];
  p.read_bytes_per_s = r[r.size() / 2];
  std::error_code ec;
  fs::remove_all(probe, ec);
  return p;
}

RecoveryMeasured supervise_recovery(const RecoveryConfig& cfg) {
  RecoveryMeasured m;
  const std::string out1 = cfg.dir + "/attempt-1.out", out2 = cfg.dir + "/attempt-2.out";
  // Attempt 1: run until it fails.
  const Child first = spawn(cfg.first_argv, out1);
  double last_beat = first.spawned_at;
  double detected = 0;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kPollS));
    int status = 0;
    const pid_t r = ::waitpid(first.pid, &status, WNOHANG);
    const double now = monotonic_s();
    if (r == first.pid) {
      detected = now;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        throw std::runtime_error("the job finished without the injected fault taking effect (output: " + out1 + ")");
      }
      m.detected_by = "launcher exit (" + describe_status(status) + ")";
      kill_job(first, cfg.dir, 1, cfg.ranks);  // stragglers of the aborted job
      break;
    }
    const int dead = dead_rank(cfg.dir, 1, cfg.ranks);
    if (dead >= 0) {
      detected = now;
      m.detected_by = "rank " + std::to_string(dead) + "'s process exited";
      kill_job(first, cfg.dir, 1, cfg.ranks);
      break;
    }
    const double beat = last_heartbeat(cfg.dir, 1, cfg.ranks);
    last_beat = std::max(last_beat, beat);
    if (beat >= 0 && now - last_beat > cfg.heartbeat_timeout_s) {
      detected = now;
      m.detected_by = "heartbeat timeout";
      kill_job(first, cfg.dir, 1, cfg.ranks);
      break;
    }
    if (now - first.spawned_at > cfg.max_attempt_s) {
      kill_job(first, cfg.dir, 1, cfg.ranks);
      throw std::runtime_error("the first attempt ran longer than " + std::to_string(cfg.max_attempt_s) +
                               " s (output: " + out1 + ")");
    }
  }
  // Attempt 2: resume from the last committed checkpoint.
  const Child second = spawn(cfg.resume_argv, out2);
  for (;;) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kPollS));
    int status = 0;
    const pid_t r = ::waitpid(second.pid, &status, WNOHANG);
    if (r == second.pid) {
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        throw std::runtime_error("the relaunched job failed (" + describe_status(status) + "): " + tail_of(out2) +
                                 " (output: " + out2 + ")");
      }
      m.attempt2_s = monotonic_s() - second.spawned_at;
      break;
    }
    if (monotonic_s() - second.spawned_at > cfg.max_attempt_s) {
      kill_job(second, cfg.dir, 2, cfg.ranks);
      throw std::runtime_error("the relaunched job ran longer than " + std::to_string(cfg.max_attempt_s) +
                               " s (output: " + out2 + ")");
    }
  }

  // The timeline, from the ranks' logs.
  const auto a1 = read_logs(cfg.dir, 1, cfg.ranks), a2 = read_logs(cfg.dir, 2, cfg.ranks);
  double fault = -1;
  for (const auto& log : a1) {
    const double t = find(log, "fault");
    if (t >= 0) fault = t;
  }
  if (fault < 0) {
    // E.g. a heartbeat timeout shorter than a step: healthy ranks were
    // declared hung before they reached the fault.
    throw std::runtime_error("no rank logged the injected fault: the job was declared failed first, by " +
                             m.detected_by + " (heartbeat timeout " + std::to_string(cfg.heartbeat_timeout_s) +
                             " s: it must exceed a step) (output: " + out1 + ")");
  }
  const double ready1 = over_ranks(a1, "ready", -1, true), ready2 = over_ranks(a2, "ready", -1, true);
  if (ready1 < 0 || ready2 < 0) throw std::runtime_error("a rank never got ready (outputs: " + out1 + ", " + out2 + ")");
  m.launch_s = ready1 - first.spawned_at;
  m.first_step_s = over_ranks(a1, "step", 1, true) - ready1;
  m.fault_at_s = fault - ready1;
  m.detection_s = detected - fault;
  m.restart_s = ready2 - detected;
  m.resumed_from_step = 0;
  for (const Event& e : a2[0]) {
    if (e.name == "load_begin") m.resumed_from_step = static_cast<int>(e.value);
  }
  if (m.resumed_from_step > 0) {
    // The phases partition fault -> redone step: a rank that got ready
    // early may start its load before the last rank is ready, so the load
    // counted here starts when every rank is ready (restart ends there).
    const double b = over_ranks(a2, "load_begin", -1, false), e = over_ranks(a2, "load_end", -1, true);
    m.load_s = e - std::max(b, ready2);
  }
  // Attempt 1's checkpoints (those every rank finished), each from the last
  // rank's start: the failure model's write is the time a checkpoint adds to
  // the run, and a rank that ends its step early (a pipeline's last stage)
  // writes while the others still compute; from the first rank's start, a
  // PP2 write measured the stages' skew too (70 ms for a 25 ms write).
  std::vector<double> writes;
  for (const Event& e : a1[0]) {
    if (e.name != "ckpt_begin") continue;
    const double b = over_ranks(a1, "ckpt_begin", e.value, true), end = over_ranks(a1, "ckpt_end", e.value, true);
    if (b >= 0 && end >= 0) writes.push_back(end - b);
  }
  std::vector<double> persists;
  for (const Event& e : a1[0]) {
    if (e.name != "persist_end") continue;
    const double end = over_ranks(a1, "ckpt_end", e.value, true), done = over_ranks(a1, "persist_end", e.value, true);
    if (end >= 0 && done >= 0) persists.push_back(done - end);
  }
  if (!persists.empty()) {
    std::sort(persists.begin(), persists.end());
    m.checkpoint_persist_s = persists[persists.size() / 2];
  }
  m.checkpoint_persist_s = std::max(0.0, m.checkpoint_persist_s);
  m.checkpoint_mode_async = !persists.empty();
  m.checkpoints = static_cast<int>(writes.size());
  if (!writes.empty()) {
    std::sort(writes.begin(), writes.end());
    m.checkpoint_write_s = writes[writes.size() / 2];
  }
  const double committed = m.resumed_from_step > 0 ? over_ranks(a1, "ckpt_end", m.resumed_from_step, true) : ready1;
  m.lost_work_s = fault - committed;
  // The last heartbeat before the fault: any rank's latest event before it.
  double beat = ready1;
  for (const auto& log : a1) {
    for (const Event& e : log) {
      if (e.t <= fault && e.name != "fault") beat = std::max(beat, e.t);
    }
  }
  m.since_heartbeat_s = fault - beat;
  const double loaded = m.resumed_from_step > 0 ? over_ranks(a2, "load_end", -1, true) : ready2;
  const double redone = over_ranks(a2, "step", cfg.fault_step, true);
  if (redone < 0) throw std::runtime_error("the relaunched job never redid step " + std::to_string(cfg.fault_step));
  m.redo_s = redone - loaded;
  m.recovery_s = redone - fault;
  return m;
}

}  // namespace trainplan
