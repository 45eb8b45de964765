#include "planner/cli/output.h"

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <iostream>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "simulator/core/error.h"

namespace trainplan {

namespace {

// The temporary file being written, removed if SIGINT, SIGTERM or SIGHUP
// arrives mid-write (a SIGKILL leaves it behind, under a unique hidden name
// that nothing reuses or follows).
char g_temp_path[4096];
volatile std::sig_atomic_t g_have_temp = 0;

extern "C" void remove_temp_and_reraise(int sig) {
  if (g_have_temp) ::unlink(g_temp_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_cleanup_handlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(sig, remove_temp_and_reraise);
  }
}

[[noreturn]] void write_failed(const std::string& flag, const std::string& path, const std::string& what, int err) {
  throw_input_error(flag, "", "cannot " + what + " \"" + path + "\": " + std::strerror(err),
                    "check the folder exists, is writable and has space");
}

}  // namespace

void check_output_path(const std::string& path, const std::string& flag) {
  if (path.empty()) throw_input_error(flag, "", "empty file name", "give a file name");
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  struct stat st {};
  if (base.empty() || base == "." || base == ".." || (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))) {
    throw_input_error(flag, "", "\"" + path + "\" is a folder", "give a file name");
  }
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw_input_error(flag, "", "the folder \"" + dir + "\" does not exist", "create it first");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw_input_error(flag, "", "cannot write into \"" + dir + "\": " + std::strerror(errno), "");
  }
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& flag) {
  check_output_path(path, flag);
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // A unique name in the target folder (same file system, so the rename is
  // atomic); mkstemp opens it O_CREAT|O_EXCL, which never follows a symlink.
  std::string temp = dir + "/." + base + ".tmp-XXXXXX";
  if (temp.size() >= sizeof g_temp_path) throw_input_error(flag, "", "path too long", "");
  install_cleanup_handlers();
  const int fd = ::mkstemp(&temp[0]);
  if (fd < 0) write_failed(flag, path, "create a file next to", errno);
  std::memcpy(g_temp_path, temp.c_str(), temp.size() + 1);
  g_have_temp = 1;
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    g_have_temp = 0;
    write_failed(flag, path, what, err);
  };
  // The mode a plain open() would give: 0666 less the umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) fail("set the mode of");
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("write");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    g_have_temp = 0;
    write_failed(flag, path, "write", err);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    g_have_temp = 0;
    write_failed(flag, path, "replace", err);
  }
  g_have_temp = 0;
  // Make the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void check_stdout() {
  errno = 0;
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout;
  if (failed) {
    const int err = errno != 0 ? errno : EIO;
    throw_input_error("standard output", "", std::string("write failed: ") + std::strerror(err),
                      "is the disk full or the pipe closed?");
  }
}

std::string config_hash(const ModelSpec& m, const ClusterSpec& c, int gpus, const std::string& extra) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s|%lld|%lld|%lld|%lld|%lld|%lld|%lld|%d|%d|%d|%d|%d|", m.name.c_str(),
                static_cast<long long>(m.layers), static_cast<long long>(m.hidden), static_cast<long long>(m.heads),
                static_cast<long long>(m.kv_heads), static_cast<long long>(m.ffn_hidden),
                static_cast<long long>(m.vocab), static_cast<long long>(m.seq_len), static_cast<int>(m.mlp),
                m.tied_embeddings, m.dropout, m.bias, static_cast<int>(m.position_embedding));
  std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), "%s|%s|%.6g|%.6g|%.6g|%d|%d|%s|", c.name.c_str(),
                c.gpu.name.c_str(), c.gpu.peak.count(Dtype::kBf16) ? c.gpu.peak.at(Dtype::kBf16).flop_per_s() : 0.0,
                c.intra_node.bandwidth.bytes_per_s(),
                c.inter_node ? c.inter_node->nic_bandwidth.bytes_per_s() : 0.0, c.gpus_per_node, gpus,
                c.calibration.c_str());
  const std::string text = std::string(buf) + extra;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

nlohmann::json plan_output_header(const char* command, const ModelSpec& model, const ClusterSpec& cluster, int gpus,
                                  const Plan& asked, const Layout& layout) {
  nlohmann::json out;
  out["tool"] = std::string("trainplan ") + kVersion;
  out["config_hash"] = config_hash(model, cluster, gpus, describe_plan(asked));
  out["command"] = command;
  out["model"] = model.name;
  out["cluster"] = cluster.name;
  out["gpus"] = layout.gpus;
  out["nodes"] = layout.nodes;
  out["plan"] = plan_to_json(layout.plan);
  out["plan"]["stage_layers"] = layout.stage_layers;
  out["valid"] = layout.feasible;
  return out;
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

double rounded(double x, int decimals) {
  double f = std::pow(10.0, decimals);
  return std::round(x * f) / f;
}

}  // namespace trainplan

namespace trainplan {

std::string human_duration(double seconds) {
  char buf[32];
  if (!std::isfinite(seconds)) return "never";
  if (seconds < 1e-3) std::snprintf(buf, sizeof buf, "%.3g s", seconds);
  else if (seconds < 1) std::snprintf(buf, sizeof buf, "%.0f ms", seconds * 1e3);
  else if (seconds < 10) std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  else if (seconds < 90) std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  else if (seconds < 5400) std::snprintf(buf, sizeof buf, "%.1f min", seconds / 60);
  else if (seconds < 2 * 86400) std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
  else if (seconds < 1e5 * 86400) std::snprintf(buf, sizeof buf, "%.1f d", seconds / 86400);
  else std::snprintf(buf, sizeof buf, "%.3g d", seconds / 86400);
  return buf;
}

ProgressLine::ProgressLine(std::string what)
    : what_(std::move(what)), tty_(isatty(2) != 0), start_(std::chrono::steady_clock::now()), phase_start_(start_) {}

void ProgressLine::update(const std::string& phase, int64_t done, int64_t total, const std::string& eta_qualifier) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (phase != phase_) {
    phase_ = phase;
    phase_start_ = now;
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < 1.0) return;  // short runs print nothing
  const double in_phase = std::chrono::duration<double>(now - phase_start_).count();
  std::string eta = "ETA ?";
  if (done > 0 && total >= done) {
    const double left = in_phase / static_cast<double>(done) * static_cast<double>(total - done);
    eta = "ETA " + (eta_qualifier.empty() ? "" : eta_qualifier + " ") + human_duration(left);
  }
  std::fprintf(stderr, "\r\033[K%s: %s %lld / %lld, %s elapsed, %s", what_.c_str(), phase.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), human_duration(elapsed).c_str(),
               eta.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::clear() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace trainplan
