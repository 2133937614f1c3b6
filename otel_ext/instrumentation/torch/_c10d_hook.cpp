// Native recording kernels for the c10d dispatcher ops (otel-ext, issue 16).
//
// What it is for: the workload-thread part of TorchDistributedInstrumentor in C++. A boxed
// kernel registered at the autograd dispatch keys of every hooked c10d op (the keys the
// pure-Python hook uses) reads what a span needs from the arguments (group name, size and
// rank, payload bytes, dtype, device, async flag, peer), continues the dispatch below autograd
// (`redispatchBoxed`, as the Python hook's `OpOverload.redispatch`), takes the per-group
// sequence number in issue order, takes the OpenTelemetry context current on the calling
// thread (a short GIL section: one `PyContextVar_Get`), and writes one record into a
// preallocated bounded ring (lock-free, multi-producer). A full ring drops the record and
// counts it; its sequence number was already taken, so ids stay aligned across ranks.
//
// Background, without the GIL: a poller thread moves records from the ring to a watch list
// and looks at `Work::isCompleted()` every 0.5 ms (the end is the middle of the bracket
// between the last look that said no and the first that said yes, as the Python hook does).
// Completed records wait in a done queue; Python drains it (`Hook.drain`) on its own
// background thread and makes the spans and metrics there.
//
// Process drain (`set_sink`): instead of the done queue, the poller encodes each completed
// record into a bounded byte buffer and sends it, without the GIL and without blocking, on a
// Unix socket to a drain process that makes the spans and metrics there (see
// otel_ext/instrumentation/collective_drain_process.py). The OpenTelemetry context is then
// reduced to its span context (trace id, span id, flags, remote, trace state) in the kernel's
// GIL section, once per distinct context object (the last one is remembered), and no Python
// object outlives the kernel. A full buffer or a drain process gone drops the record, counted.
//
// Watch state (issue 31): the poller also keeps, per process group, the oldest collective it
// still watches (op, group rank and size, seq, bytes, device, issue time) and the last
// sequence number that completed without failure, and publishes them under a small mutex
// whenever they change; `watch_state` copies them (a background thread, GIL held). Nothing
// is added on the workload thread: the record already carried all of it. Point-to-point
// operations (sequenced per ordered pair) are not in it.
//
// Threading contract: `record` may run on any thread (the workload's, the autograd engine's,
// DDP's); it never blocks on anything but the GIL for the context read and never throws
// anything but the original kernel's exception. `drain`, `flush_window`, `shutdown` are called
// from Python with the GIL held.
//
// No code copied from other projects; written against the public headers of torch 2.13.

#include <Python.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/library.h>

#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int64_t kNone = INT64_MIN;

// Counts forks (in the child): a hook made before the fork lost its poller thread, and a lock
// may have been held by another thread at that moment, so its kernels only redispatch there;
// a hook made in the child (instrument() again) records.
std::atomic<uint64_t> g_fork_generation{0};
void mark_forked() { g_fork_generation.fetch_add(1); }
constexpr int64_t kPollNs = 500000;  // 0.5 ms, as the Python poller (default)

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How to read one op's arguments (indices into its schema's arguments); from Python's _OPS.
struct Spec {
  int pg;        // -1: the group is named by a string argument (group_name_at)
  int payload;   // -1: none
  int role;      // 0 none, 1 tensor, 2 tensor list, 3 list of tensor lists
  int async_at;  // -1: not a collective with async_op
  int peer_at;   // -1: none
  bool send;
  bool p2p;      // send/recv (recv from any source has p2p && peer_at < 0)
  int group_name_at;  // symm_mem ops: index of `str group_name`, else -1
};

struct Failure {
  std::string type;
  std::string message;
};

// The parent span's context as the drain process needs it (process drain only).
struct Parent {
  bool valid = false;
  uint64_t trace_hi = 0, trace_lo = 0, span_id = 0;
  uint8_t flags = 0;
  bool remote = false;
  std::string trace_state;  // the W3C header form; empty: none
};

struct Record {
  int32_t op = -1;
  int64_t n = 0;
  int64_t t0 = 0, t1 = 0, end = 0;
  double uncertainty = -1.0;
  bool enqueue_only = false;
  std::string group;
  int64_t gsize = 0, grank = 0;
  int64_t seq = -1, src = kNone, dst = kNone, peer = kNone;
  int64_t nbytes = 0;
  int8_t dtype = -1;  // c10::ScalarType, -1 none
  int8_t device_type = -1;
  int8_t device_index = -1;
  int8_t async_op = -1;  // -1 not applicable
  int64_t device_ns = -1;  // CUDA: the work's device duration (PyTorch's per-work events)
  std::unique_ptr<Failure> failure;
  c10::intrusive_ptr<c10d::Work> work;
  PyObject* ctx = nullptr;  // strong reference (taken and released with the GIL)
  Parent parent;            // process drain: ctx reduced to its span context
};

const char* dtype_name(int8_t t) {
  switch (static_cast<c10::ScalarType>(t)) {
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::ComplexHalf: return "complex32";
    case c10::ScalarType::ComplexFloat: return "complex64";
    case c10::ScalarType::ComplexDouble: return "complex128";
    case c10::ScalarType::Bool: return "bool";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Float8_e5m2: return "float8_e5m2";
    case c10::ScalarType::Float8_e4m3fn: return "float8_e4m3fn";
    case c10::ScalarType::Float8_e5m2fnuz: return "float8_e5m2fnuz";
    case c10::ScalarType::Float8_e4m3fnuz: return "float8_e4m3fnuz";
    case c10::ScalarType::UInt16: return "uint16";
    case c10::ScalarType::UInt32: return "uint32";
    case c10::ScalarType::UInt64: return "uint64";
    default: return nullptr;
  }
}

// The Python class a C++ exception from a c10d kernel surfaces as (torch's own mapping).
std::unique_ptr<Failure> classify(std::exception_ptr ep) {
  auto f = std::make_unique<Failure>();
  try {
    std::rethrow_exception(ep);
  } catch (const c10::DistBackendError& e) {
    f->type = "DistBackendError", f->message = e.what_without_backtrace();
  } catch (const c10::DistStoreError& e) {
    f->type = "DistStoreError", f->message = e.what_without_backtrace();
  } catch (const c10::DistNetworkError& e) {
    f->type = "DistNetworkError", f->message = e.what_without_backtrace();
  } catch (const c10::DistError& e) {
    f->type = "DistError", f->message = e.what_without_backtrace();
  } catch (const c10::NotImplementedError& e) {
    f->type = "NotImplementedError", f->message = e.what_without_backtrace();
  } catch (const c10::ValueError& e) {
    f->type = "ValueError", f->message = e.what_without_backtrace();
  } catch (const c10::TypeError& e) {
    f->type = "TypeError", f->message = e.what_without_backtrace();
  } catch (const c10::IndexError& e) {
    f->type = "IndexError", f->message = e.what_without_backtrace();
  } catch (const c10::Error& e) {
    f->type = "RuntimeError", f->message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    f->type = "RuntimeError", f->message = e.what();
  } catch (...) {
    f->type = "Error", f->message = "unknown C++ exception";
  }
  return f;
}

// Bounded multi-producer ring (Vyukov's sequence-per-cell scheme); one consumer (the poller).
class Ring {
 public:
  explicit Ring(size_t capacity) {
    size_t cap = 2;
    while (cap < capacity) cap <<= 1;
    mask_ = cap - 1;
    cells_ = std::make_unique<Cell[]>(cap);
    for (size_t i = 0; i < cap; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  bool push(Record&& r) {
    size_t pos = head_.load(std::memory_order_relaxed);
    Cell* cell;
    for (;;) {
      cell = &cells_[pos & mask_];
      size_t s = cell->seq.load(std::memory_order_acquire);
      intptr_t diff = static_cast<intptr_t>(s) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
    cell->rec = std::move(r);
    cell->seq.store(pos + 1, std::memory_order_release);
    return true;
  }

  bool pop(Record& out) {
    Cell& cell = cells_[tail_ & mask_];
    if (cell.seq.load(std::memory_order_acquire) != tail_ + 1) return false;
    out = std::move(cell.rec);
    cell.rec = Record();
    cell.seq.store(tail_ + mask_ + 1, std::memory_order_release);
    ++tail_;
    return true;
  }

 private:
  struct Cell {
    std::atomic<size_t> seq{0};
    Record rec;
  };
  std::unique_ptr<Cell[]> cells_;
  size_t mask_ = 0;
  alignas(64) std::atomic<size_t> head_{0};
  alignas(64) size_t tail_ = 0;
};

// One group's watch state (see the header: issue 31).
struct GroupWatch {
  bool pending = false;
  int32_t op = -1;
  int64_t gsize = 0, grank = 0, seq = -1, nbytes = 0, since = 0;
  int8_t device_type = -1, device_index = -1;
  int64_t last_seq = -1;
};

// A group's size, this member's rank and device, as its first completed record showed.
struct GroupShape {
  int64_t gsize = 0, grank = 0;
  int8_t device_type = -1, device_index = -1;
};

class Hook : public std::enable_shared_from_this<Hook> {
 public:
  Hook(std::vector<Spec> specs, size_t capacity, py::object ctxvar)
      : specs_(std::move(specs)), capacity_(capacity), ring_(capacity) {
    // OTEL_EXT_COLLECTIVE_POLL_US: the poller's period (benchmarks; default 500).
    if (const char* v = std::getenv("OTEL_EXT_COLLECTIVE_POLL_US")) {
      const long us = std::strtol(v, nullptr, 10);
      if (us > 0 && us <= 1000000) poll_ns_ = static_cast<int64_t>(us) * 1000;
    }
    ctxvar_ = ctxvar.is_none() ? nullptr : ctxvar.release().ptr();
    poller_ = std::thread([this] { poll_loop(); });
  }

  // Never lets a joinable std::thread be destroyed (that calls std::terminate and would abort
  // the workload at exit): a poller that could not be joined (the hook destroyed on the
  // poller thread itself, or during static destruction at exit) is detached.
  ~Hook() {
    stop_poller();
    if (poller_.joinable()) poller_.detach();
  }

  // -- workload thread ----------------------------------------------------------------------
  void record(int idx, const c10::OperatorHandle& op, c10::DispatchKeySet ks,
              torch::jit::Stack* stack) {
    if (closed_.load(std::memory_order_relaxed) ||
        g_fork_generation.load(std::memory_order_relaxed) != generation_) {
      op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
      return;
    }
    Record r;
    r.op = idx;
    r.t0 = now_ns();
    bool ok = capture_arguments(specs_[idx], op, *stack, r);
    try {
      op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
    } catch (...) {
      r.t1 = r.end = now_ns();
      if (ok) {
        r.failure = classify(std::current_exception());
        finish_record(specs_[idx], std::move(r));
      }
      throw;
    }
    r.t1 = r.end = now_ns();
    if (!ok) return;
    try {
      const size_t nret = op.schema().returns().size();
      for (size_t i = stack->size() - std::min(nret, stack->size()); i < stack->size(); ++i) {
        const c10::IValue& v = (*stack)[i];
        if (v.isObject() && v.type() == work_type()) {
          r.work = v.toCustomClass<c10d::Work>();
          break;
        }
      }
    } catch (...) {
      invalid_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    finish_record(specs_[idx], std::move(r));
  }

  // -- Python side (GIL held) ---------------------------------------------------------------
  py::list drain(size_t max_records, double timeout_s) {
    std::vector<Record> batch;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lk(done_mu_);
      if (done_.empty() && timeout_s > 0) {
        const size_t enough = std::max<size_t>(capacity_ / 4, 1);
        done_cv_.wait_for(lk, std::chrono::duration<double>(timeout_s),
                          [this, enough] { return done_.size() >= enough || stopping_.load(); });
      }
      while (!done_.empty() && batch.size() < max_records) {
        batch.push_back(std::move(done_.front()));
        done_.pop_front();
      }
    }
    py::list out;
    for (Record& r : batch) {
      py::object ctx = r.ctx ? py::reinterpret_steal<py::object>(r.ctx) : py::none();
      r.ctx = nullptr;
      const char* dt = r.dtype >= 0 ? dtype_name(r.dtype) : nullptr;
      py::object dtype = dt ? py::object(py::str(dt)) : py::none();
      if (r.dtype >= 0 && !dt)
        dtype = py::str(c10::toString(static_cast<c10::ScalarType>(r.dtype)));
      py::object device = py::none();
      if (r.device_type >= 0)
        device = py::str(c10::Device(static_cast<c10::DeviceType>(r.device_type),
                                     static_cast<c10::DeviceIndex>(r.device_index))
                             .str());
      auto opt = [](int64_t v) { return v == kNone ? py::object(py::none()) : py::int_(v); };
      py::object error_type = r.failure ? py::object(py::str(r.failure->type)) : py::none();
      py::object error_msg = r.failure ? py::object(py::str(r.failure->message)) : py::none();
      out.append(py::make_tuple(
          r.op, r.group, r.gsize, r.grank, r.seq, opt(r.src), opt(r.dst), opt(r.peer), r.nbytes,
          dtype, device, r.async_op < 0 ? py::object(py::none()) : py::bool_(r.async_op != 0),
          r.t0, r.t1, r.end,
          r.uncertainty < 0 ? py::object(py::none()) : py::float_(r.uncertainty),
          r.enqueue_only, error_type, error_msg, ctx, r.device_ns));
    }
    delivered_.fetch_add(batch.size(), std::memory_order_relaxed);
    return out;
  }

  // The process drain: completed records go to `fd` (a dup the hook owns and closes), at
  // most `max_bytes` unsent; `span_key` is OpenTelemetry's context key of the current span.
  // Before the kernels are installed (GIL held).
  void set_sink(int fd, py::object span_key, size_t max_bytes) {
    if (fd < 0) throw std::invalid_argument("set_sink: a socket descriptor is needed");
    if (pushed_.load() != 0) throw std::logic_error("set_sink: records were already taken");
    span_key_ = span_key.release().ptr();
    out_max_ = std::max<size_t>(max_bytes, 4096);
    sink_fd_ = fd;
    sink_.store(true);
  }

  // Process drain: ask for a marker frame after every record completed so far; the drain
  // process answers with `token` once it has made their spans and metrics and flushed them.
  void request_marker(int64_t token) { marker_requested_.store(token); }
  // Process drain: bytes encoded but not yet handed to the socket.
  int64_t unsent() const { return unsent_.load(); }
  // Process drain: whether the socket failed (the drain process is gone).
  bool sink_broken() const { return sink_broken_.load(); }

  // flush(): works issued before `before` and still open at `after` are given up on.
  void flush_window(int64_t before, int64_t after) {
    give_up_before_.store(before);
    give_up_after_.store(after);
  }

  // Per group: (group, op index or -1, group size, group rank, oldest pending seq or -1,
  // its bytes, its issue time in ns or 0, its device (else the group's first completed
  // record's) or None, last completed seq or -1).
  py::list watch_state() {
    std::vector<std::pair<std::string, GroupWatch>> copy;
    {
      std::lock_guard<std::mutex> lk(watch_mu_);
      copy.assign(watch_.begin(), watch_.end());
    }
    py::list out;
    for (const auto& [group, w] : copy) {
      py::object device = py::none();
      if (w.device_type >= 0)
        device = py::str(c10::Device(static_cast<c10::DeviceType>(w.device_type),
                                     static_cast<c10::DeviceIndex>(w.device_index))
                             .str());
      out.append(py::make_tuple(group, w.pending ? w.op : -1, w.gsize, w.grank,
                                w.pending ? w.seq : int64_t(-1), w.pending ? w.nbytes : 0,
                                w.pending ? w.since : 0, device, w.last_seq));
    }
    return out;
  }

  int64_t in_flight() const {
    return static_cast<int64_t>(pushed_.load()) - static_cast<int64_t>(delivered_.load());
  }
  int64_t dropped() const { return static_cast<int64_t>(dropped_.load()); }
  // Whether this process was forked after the hook was made (then it records nothing).
  bool forked() const { return g_fork_generation.load() != generation_; }
  int64_t invalid() const { return static_cast<int64_t>(invalid_.load()); }
  int64_t issued() const { return static_cast<int64_t>(issued_.load()); }
  // Tests: stop taking records from the ring (so a burst fills it deterministically).
  void pause(bool paused) { paused_.store(paused); }

  // Stop recording, stop the poller, release every context reference (GIL held).
  void shutdown() {
    closed_.store(true);
    {
      py::gil_scoped_release nogil;
      stop_poller();
    }
    std::vector<Record> rest;
    Record r;
    while (ring_.pop(r)) rest.push_back(std::move(r));
    for (auto& w : watching_) rest.push_back(std::move(w));
    watching_.clear();
    {
      std::lock_guard<std::mutex> lk(done_mu_);
      for (auto& d : done_) rest.push_back(std::move(d));
      done_.clear();
    }
    for (auto& x : rest) Py_XDECREF(x.ctx), x.ctx = nullptr;
    Py_XDECREF(ctxvar_);
    ctxvar_ = nullptr;
    Py_XDECREF(last_ctx_);
    last_ctx_ = nullptr;
    Py_XDECREF(span_key_);
    span_key_ = nullptr;
    if (sink_fd_ >= 0) {
      if (!forked()) {
        py::gil_scoped_release nogil;
        pump(true);  // what the poller left unsent, with a short bound
      }
      ::close(sink_fd_);
      sink_fd_ = -1;
    }
  }

 private:
  static const c10::TypePtr& work_type() {
    static const c10::TypePtr t = c10::getCustomClassType<c10::intrusive_ptr<c10d::Work>>();
    return t;
  }

  static void add_tensor(const at::Tensor& t, Record& r, bool& first) {
    if (!t.defined()) return;
    r.nbytes += static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
    if (first) {
      first = false;
      r.dtype = static_cast<int8_t>(t.scalar_type());
      r.device_type = static_cast<int8_t>(t.device().type());
      r.device_index = static_cast<int8_t>(t.device().index());
    }
  }

  static void identity_of(const c10::IValue& v, Record& r) {
    const c10::IValue* x = &v;
    c10::IValue inner;
    for (int depth = 0; depth < 2 && x->isList(); ++depth) {
      auto l = x->toListRef();
      if (l.empty()) return;
      inner = l[0];
      x = &inner;
    }
    if (x->isTensor() && x->toTensor().defined()) {
      r.device_type = static_cast<int8_t>(x->toTensor().device().type());
      r.device_index = static_cast<int8_t>(x->toTensor().device().index());
    }
  }

  bool capture_arguments(const Spec& s, const c10::OperatorHandle& op,
                         const torch::jit::Stack& stack, Record& r) noexcept {
    try {
      const size_t nargs = op.schema().arguments().size();
      if (stack.size() < nargs || s.pg >= static_cast<int>(nargs) ||
          s.group_name_at >= static_cast<int>(nargs))
        throw std::out_of_range("args");
      const c10::IValue* a = stack.data() + (stack.size() - nargs);
      c10::intrusive_ptr<c10d::ProcessGroup> pg;
      if (s.pg >= 0) {
        pg = a[s.pg].toCustomClass<c10d::ProcessGroup>();
      } else {
        // symm_mem ops: the group by name. A tensor subclass here (a fake tensor while
        // torch.compile traces) issues no collective: not recorded, not counted.
        if (s.payload >= 0 && a[s.payload].isTensor() &&
            a[s.payload].toTensor().key_set().has(c10::DispatchKey::Python))
          return false;
        pg = c10d::resolve_process_group(a[s.group_name_at].toStringRef());
      }
      r.group = pg->getGroupName();
      r.gsize = pg->getSize();
      r.grank = pg->getRank();
      bool first = true;
      if (s.payload >= 0 && s.payload < static_cast<int>(nargs)) {
        const c10::IValue& p = a[s.payload];
        if (s.role == 1 && p.isTensor()) {
          add_tensor(p.toTensor(), r, first);
        } else if (s.role == 2 && p.isTensorList()) {
          for (const at::Tensor& t : p.toTensorList().vec()) add_tensor(t, r, first);
        } else if (s.role == 3 && p.isList()) {
          for (const c10::IValue& inner : p.toListRef())
            if (inner.isTensorList())
              for (const at::Tensor& t : inner.toTensorList().vec()) add_tensor(t, r, first);
        }
      }
      if (first && nargs > 0) identity_of(a[0], r);
      if (r.device_type == static_cast<int8_t>(c10::DeviceType::CUDA) && s.pg >= 0)
        enable_timing(pg);
      if (s.async_at >= 0)
        r.async_op = s.async_at < static_cast<int>(nargs) ? (a[s.async_at].toBool() ? 1 : 0) : 1;
      if (s.peer_at >= 0 && s.peer_at < static_cast<int>(nargs)) r.peer = a[s.peer_at].toInt();
      return true;
    } catch (...) {
      invalid_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }

  // CUDA: ask the group to time its works (ProcessGroupNCCL records CUDA events around each
  // collective on its stream; Work::getDuration() reads them). Once per group; never throws.
  void enable_timing(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
    {
      std::lock_guard<std::mutex> lk(seq_mu_);
      if (!timed_groups_.insert(pg.get()).second) return;
    }
    try {
      pg->enableCollectivesTiming();
    } catch (...) {  // a backend without timing: host timing
    }
  }

  int64_t next_seq(const std::string& group, int64_t src, int64_t dst) {
    std::lock_guard<std::mutex> lk(seq_mu_);
    return seqs_[std::make_tuple(group, src, dst)]++;
  }

  void finish_record(const Spec& s, Record&& r) noexcept {
    try {
      if (s.p2p) {
        if (s.peer_at >= 0 && r.peer != kNone) {
          r.src = s.send ? r.grank : r.peer;
          r.dst = s.send ? r.peer : r.grank;
          r.seq = next_seq(r.group, r.src, r.dst);
        }  // else: receive from any source, sequenced at completion
      } else {
        r.seq = next_seq(r.group, kNone, kNone);
      }
      r.n = static_cast<int64_t>(issued_.fetch_add(1, std::memory_order_relaxed)) + 1;
      push(std::move(r));
    } catch (...) {
      invalid_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  void push(Record&& r) {
    PyObject* var = ctxvar_;
    if (var != nullptr && Py_IsInitialized() && !_Py_IsFinalizing() &&
        PyGILState_GetThisThreadState() != nullptr) {
      // A thread with a Python thread state: read its current OpenTelemetry context. The push
      // happens under the GIL too, so a full ring can release the reference at once.
      PyGILState_STATE g = PyGILState_Ensure();
      if (!closed_.load()) {
        PyObject* ctx = nullptr;
        if (PyContextVar_Get(var, nullptr, &ctx) < 0) {
          PyErr_Clear();
          ctx = nullptr;
        }
        if (sink_.load(std::memory_order_relaxed)) {
          r.parent = parent_of(ctx);
          Py_XDECREF(ctx);
          ctx = nullptr;
        }
        r.ctx = ctx;
        if (ring_.push(std::move(r))) {
          pushed_.fetch_add(1, std::memory_order_relaxed);
        } else {
          Py_XDECREF(ctx);
          dropped_.fetch_add(1, std::memory_order_relaxed);
        }
      }
      PyGILState_Release(g);
      return;
    }
    // A thread without Python state (a C++ engine thread): no context, no GIL needed.
    if (ring_.push(std::move(r)))
      pushed_.fetch_add(1, std::memory_order_relaxed);
    else
      dropped_.fetch_add(1, std::memory_order_relaxed);
  }

  // -- poller thread (no GIL) ---------------------------------------------------------------
  void stop_poller() {
    if (forked()) {
      // The poller thread does not exist in this (forked) process: never join it, and keep
      // the std::thread object from terminating the process when destroyed.
      stopping_.store(true);
      if (poller_.joinable()) new std::thread(std::move(poller_));
      return;
    }
    if (stopping_.exchange(true)) {
      if (poller_.joinable() && poller_.get_id() != std::this_thread::get_id()) poller_.join();
      return;
    }
    done_cv_.notify_all();
    if (poller_.joinable() && poller_.get_id() != std::this_thread::get_id()) poller_.join();
  }

  // The drain is woken only when the done queue passes a quarter of the capacity; otherwise
  // it takes what is there when its own wait times out (batches, few GIL handoffs).
  void complete(Record&& r) {
    if (!r.failure && !r.enqueue_only && r.seq >= 0 && r.src == kNone) {
      auto found = last_done_.find(r.group);
      if (found == last_done_.end()) {
        last_done_[r.group] = r.seq;
        shape_[r.group] = GroupShape{r.gsize, r.grank, r.device_type, r.device_index};
      } else if (r.seq > found->second) {
        found->second = r.seq;
      }
      watch_dirty_ = true;
    } else if (r.work) {
      watch_dirty_ = true;  // a watched record left (given up on, or failed)
    }
    if (sink_.load(std::memory_order_relaxed)) {
      encode(r);
      return;
    }
    std::lock_guard<std::mutex> lk(done_mu_);
    done_.push_back(std::move(r));
    if (done_.size() == std::max<size_t>(capacity_ / 4, 1)) done_cv_.notify_one();
  }

  // The poller's view of every group, published for `watch_state` (poller thread).
  void publish_watch() {
    watch_dirty_ = false;
    std::map<std::string, GroupWatch> fresh;
    for (const auto& [group, last] : last_done_) fresh[group].last_seq = last;
    for (const Record& e : watching_) {
      if (e.seq < 0 || e.src != kNone) continue;  // p2p: sequenced per pair
      GroupWatch& w = fresh[e.group];
      if (w.pending && w.seq <= e.seq) continue;
      w.pending = true;
      w.op = e.op;
      w.gsize = e.gsize, w.grank = e.grank, w.seq = e.seq, w.nbytes = e.nbytes, w.since = e.t0;
      w.device_type = e.device_type, w.device_index = e.device_index;
    }
    for (auto& [group, w] : fresh) {
      if (w.pending) continue;
      auto it = shape_.find(group);
      if (it == shape_.end()) continue;
      w.gsize = it->second.gsize, w.grank = it->second.grank;
      w.device_type = it->second.device_type, w.device_index = it->second.device_index;
    }
    std::lock_guard<std::mutex> lk(watch_mu_);
    watch_.swap(fresh);
  }

  size_t done_size() {
    std::lock_guard<std::mutex> lk(done_mu_);
    return done_.size();
  }

  void poll_loop() {
    while (!stopping_.load()) {
      if (sink_.load(std::memory_order_relaxed)) pump(false);
      Record r;
      size_t held = watching_.size() + done_size();
      while (!paused_.load() && held < capacity_ && ring_.pop(r)) {
        if (!r.work || r.failure) {
          // No Work (symm_mem ops run on the stream): the span covers the issuing call.
          if (!r.work && !r.failure) r.enqueue_only = specs_[r.op].pg < 0;
          complete(std::move(r));
        } else {
          watching_.push_back(std::move(r));
          watch_dirty_ = true;
        }
        ++held;
        r = Record();
      }
      if (watch_dirty_) publish_watch();
      if (watching_.empty()) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(poll_ns_));
        continue;
      }
      look();
      if (watch_dirty_) publish_watch();
      if (!watching_.empty()) std::this_thread::sleep_for(std::chrono::nanoseconds(poll_ns_));
    }
  }

  // One look at every watched work: completed ones go to the done queue.
  void look() {
    {
      const int64_t now = now_ns();
      const int64_t before = give_up_before_.load(), after = give_up_after_.load();
      const int64_t give_up = std::max(now >= after ? before : 0, now - int64_t(300) * 1000000000);
      std::vector<Record> keep;
      keep.reserve(watching_.size());
      for (Record& e : watching_) {
        const int64_t asked = now_ns();  // a "no" holds from here on
        bool done;
        try {
          done = e.work->isCompleted();
        } catch (...) {
          done = true;
        }
        if (done) {
          const int64_t seen = now_ns(), last = e.end;  // completed in [last, seen]
          e.end = (last + seen) / 2;
          e.uncertainty = static_cast<double>(seen - last) / 2.0;
          try {
            std::exception_ptr ep = e.work->exception();
            if (ep) e.failure = classify(ep);
          } catch (...) {
          }
          if (!e.failure && e.seq < 0) sequence_any_source(e);
          if (!e.failure && e.device_type == static_cast<int8_t>(c10::DeviceType::CUDA)) {
            try {
              const float ms = e.work->getDuration();
              if (ms >= 0) e.device_ns = static_cast<int64_t>(static_cast<double>(ms) * 1e6);
            } catch (...) {  // no per-work timing (not enabled, or another backend)
            }
          }
        } else if (e.t0 < give_up) {
          e.end = e.t1;
          e.enqueue_only = true;
        } else {
          e.end = asked;  // the last look that found it not complete
          keep.push_back(std::move(e));
          continue;
        }
        e.work.reset();
        complete(std::move(e));
      }
      watching_.swap(keep);
    }
  }

  // -- process drain ------------------------------------------------------------------------
  // The span context of `ctx` (GIL held): OpenTelemetry's Context is a dict whose entry at the
  // current-span key is the span; get_span_context() gives ids, flags and trace state.
  Parent parent_of(PyObject* ctx) {
    if (ctx == last_ctx_ && ctx != nullptr) return last_parent_;
    Parent p;
    if (ctx != nullptr && span_key_ != nullptr && PyDict_Check(ctx)) {
      PyObject* span = PyDict_GetItemWithError(ctx, span_key_);  // borrowed
      PyObject* sc = span ? PyObject_CallMethod(span, "get_span_context", nullptr) : nullptr;
      if (sc != nullptr) {
        auto attr = [sc](const char* name) { return PyObject_GetAttrString(sc, name); };
        PyObject* valid = attr("is_valid");
        if (valid != nullptr && PyObject_IsTrue(valid) == 1) {
          PyObject* tid = attr("trace_id");
          PyObject* sid = attr("span_id");
          PyObject* flags = attr("trace_flags");
          PyObject* remote = attr("is_remote");
          PyObject* state = attr("trace_state");
          PyObject* shift = PyLong_FromLong(64);
          PyObject* hi = (tid && shift) ? PyNumber_Rshift(tid, shift) : nullptr;
          if (tid && sid && flags && hi) {
            p.valid = true;
            p.trace_lo = PyLong_AsUnsignedLongLongMask(tid);
            p.trace_hi = PyLong_AsUnsignedLongLongMask(hi);
            p.span_id = PyLong_AsUnsignedLongLongMask(sid);
            p.flags = static_cast<uint8_t>(PyLong_AsUnsignedLongMask(flags) & 0xff);
            p.remote = remote != nullptr && PyObject_IsTrue(remote) == 1;
            if (state != nullptr && PyObject_Length(state) > 0) {
              PyObject* header = PyObject_CallMethod(state, "to_header", nullptr);
              Py_ssize_t n = 0;
              const char* text = header ? PyUnicode_AsUTF8AndSize(header, &n) : nullptr;
              if (text != nullptr) p.trace_state.assign(text, static_cast<size_t>(n));
              Py_XDECREF(header);
            }
          }
          Py_XDECREF(hi);
          Py_XDECREF(shift);
          Py_XDECREF(state);
          Py_XDECREF(remote);
          Py_XDECREF(flags);
          Py_XDECREF(sid);
          Py_XDECREF(tid);
        }
        Py_XDECREF(valid);
        Py_DECREF(sc);
      }
      if (PyErr_Occurred()) PyErr_Clear();
    }
    Py_XINCREF(ctx);  // remembered: the object cannot be freed and its address reused
    Py_XDECREF(last_ctx_);
    last_ctx_ = ctx;
    last_parent_ = p;
    return p;
  }

  template <typename T>
  static void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static void put_text(std::string& out, const char* text, size_t n) {
    put<uint32_t>(out, static_cast<uint32_t>(n));
    out.append(text, n);
  }
  static void put_none(std::string& out) { put<uint32_t>(out, 0xffffffffu); }

  // One completed record as a frame (native byte order; the reader is on this host):
  // u32 body length, u8 kind 1, then collective_drain_process._RECORD and six strings.
  void encode(Record& r) {
    delivered_.fetch_add(1, std::memory_order_relaxed);
    if (sink_broken_.load() || out_.size() - out_sent_ >= out_max_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const size_t at = out_.size();
    put<uint32_t>(out_, 0);
    put<uint8_t>(out_, 1);
    put<int32_t>(out_, r.op);
    for (int64_t v : {r.gsize, r.grank, r.seq, r.src, r.dst, r.peer, r.nbytes, r.t0, r.t1,
                      r.end, r.device_ns})
      put<int64_t>(out_, v);
    put<double>(out_, r.uncertainty);
    put<int8_t>(out_, r.async_op);
    put<uint8_t>(out_, r.enqueue_only ? 1 : 0);
    put<uint8_t>(out_, r.parent.valid ? 1 : 0);
    put<uint8_t>(out_, r.parent.flags);
    put<uint8_t>(out_, r.parent.remote ? 1 : 0);
    put<uint64_t>(out_, r.parent.trace_hi);
    put<uint64_t>(out_, r.parent.trace_lo);
    put<uint64_t>(out_, r.parent.span_id);
    put_text(out_, r.group.data(), r.group.size());
    if (r.dtype >= 0) {
      const char* dt = dtype_name(r.dtype);
      const std::string name = dt ? std::string(dt)
                                  : std::string(c10::toString(static_cast<c10::ScalarType>(r.dtype)));
      put_text(out_, name.data(), name.size());
    } else {
      put_none(out_);
    }
    if (r.device_type >= 0) {
      const std::string dev = c10::Device(static_cast<c10::DeviceType>(r.device_type),
                                          static_cast<c10::DeviceIndex>(r.device_index))
                                  .str();
      put_text(out_, dev.data(), dev.size());
    } else {
      put_none(out_);
    }
    if (r.failure) {
      put_text(out_, r.failure->type.data(), r.failure->type.size());
      put_text(out_, r.failure->message.data(), r.failure->message.size());
    } else {
      put_none(out_);
      put_none(out_);
    }
    put_text(out_, r.parent.trace_state.data(), r.parent.trace_state.size());
    const uint32_t body = static_cast<uint32_t>(out_.size() - at - sizeof(uint32_t));
    std::memcpy(&out_[at], &body, sizeof(body));
  }

  // Sends what is encoded (poller thread; at shutdown, after the poller stopped). Never
  // blocks: a full socket keeps the bytes for the next look; `final` retries for up to 2 s.
  void pump(bool final) {
    const int64_t m = marker_requested_.load();
    if (m != marker_written_) {
      put<uint32_t>(out_, 1 + sizeof(int64_t));
      put<uint8_t>(out_, 2);
      put<int64_t>(out_, m);
      marker_written_ = m;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (out_sent_ < out_.size() && !sink_broken_.load()) {
      const ssize_t n = ::send(sink_fd_, out_.data() + out_sent_, out_.size() - out_sent_,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        out_sent_ += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!final || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } else {
        sink_broken_.store(true);  // the drain process is gone: what is left is dropped
        out_.clear();
        out_sent_ = 0;
      }
    }
    if (out_sent_ == out_.size()) {
      out_.clear();
      out_sent_ = 0;
    } else if (out_sent_ >= (size_t(1) << 20)) {
      out_.erase(0, out_sent_);
      out_sent_ = 0;
    }
    unsent_.store(static_cast<int64_t>(out_.size() - out_sent_));
  }

  void sequence_any_source(Record& e) {
    try {
      const int64_t src = e.work->sourceRank();
      e.src = src, e.dst = e.grank, e.peer = src;
      e.seq = next_seq(e.group, src, e.grank);
    } catch (...) {
    }
  }

  std::vector<Spec> specs_;
  size_t capacity_;
  int64_t poll_ns_ = kPollNs;
  Ring ring_;
  PyObject* ctxvar_ = nullptr;
  std::atomic<bool> closed_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> paused_{false};
  const uint64_t generation_ = g_fork_generation.load();
  std::atomic<uint64_t> issued_{0}, pushed_{0}, delivered_{0}, dropped_{0}, invalid_{0};
  std::atomic<int64_t> give_up_before_{0}, give_up_after_{0};
  std::mutex seq_mu_;
  std::map<std::tuple<std::string, int64_t, int64_t>, int64_t> seqs_;
  std::set<const void*> timed_groups_;
  std::vector<Record> watching_;  // poller thread only (and shutdown, after it stopped)
  std::map<std::string, int64_t> last_done_;  // poller thread only
  std::map<std::string, GroupShape> shape_;  // poller thread only
  bool watch_dirty_ = false;                  // poller thread only
  std::mutex watch_mu_;
  std::map<std::string, GroupWatch> watch_;  // watch_mu_
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::deque<Record> done_;
  std::thread poller_;
  // process drain (set_sink); out_, out_sent_, marker_written_: poller thread only
  std::atomic<bool> sink_{false}, sink_broken_{false};
  int sink_fd_ = -1;
  size_t out_max_ = 0;
  std::string out_;
  size_t out_sent_ = 0;
  std::atomic<int64_t> marker_requested_{0}, unsent_{0};
  int64_t marker_written_ = 0;
  PyObject* span_key_ = nullptr;  // GIL
  PyObject* last_ctx_ = nullptr;  // GIL
  Parent last_parent_;            // GIL
};

class RecordingKernel final : public c10::OperatorKernel {
 public:
  RecordingKernel(std::shared_ptr<Hook> hook, int idx) : hook_(std::move(hook)), idx_(idx) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                  torch::jit::Stack* stack) {
    hook_->record(idx_, op, ks, stack);
  }

 private:
  std::shared_ptr<Hook> hook_;
  int idx_;
};

// Lets the nested process-group call of a functional collective reach the recording kernels:
// the autograd fallback would run the functional kernel with autograd excluded.
class PassThroughKernel final : public c10::OperatorKernel {
 public:
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                  torch::jit::Stack* stack) {
    op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
  }
};

class SilentWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

c10::DispatchKey key_of(const std::string& name) { return c10::parseDispatchKey(name); }

// The registrations: destroying it (uninstall) restores the original kernels.
class Installation {
 public:
  // ops[i] = (namespace, op name, dispatch keys): the recording kernel for the hook's spec i.
  Installation(
      std::shared_ptr<Hook> hook,
      const std::vector<std::tuple<std::string, std::string, std::vector<std::string>>>& ops,
      const std::vector<std::string>& functional, const std::vector<std::string>& keys)
      : hook_(std::move(hook)) {
    SilentWarnings silent;  // "Overriding a previously registered kernel" (autograd fallback)
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    std::map<std::string, torch::Library*> by_ns;
    for (size_t i = 0; i < ops.size(); ++i) {
      const auto& [ns, name, op_keys] = ops[i];
      torch::Library*& lib = by_ns[ns];
      if (lib == nullptr) {
        libs_.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, ns, std::nullopt,
                                                         __FILE__, __LINE__));
        lib = libs_.back().get();
      }
      for (const auto& k : op_keys) {
        lib->impl(name.c_str(),
                  torch::dispatch(key_of(k), torch::CppFunction::makeFromBoxedFunctor(
                                                 std::make_unique<RecordingKernel>(
                                                     hook_, static_cast<int>(i)))));
      }
    }
    if (!functional.empty()) {
      auto fn = std::make_unique<torch::Library>(torch::Library::IMPL, "_c10d_functional",
                                                 std::nullopt, __FILE__, __LINE__);
      for (const auto& name : functional)
        for (const auto& k : keys)
          fn->impl(name.c_str(),
                   torch::dispatch(key_of(k), torch::CppFunction::makeFromBoxedFunctor(
                                                  std::make_unique<PassThroughKernel>())));
      libs_.push_back(std::move(fn));
    }
  }

  void uninstall() {
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    libs_.clear();
  }

 private:
  std::shared_ptr<Hook> hook_;
  std::vector<std::unique_ptr<torch::Library>> libs_;
};

}  // namespace

PYBIND11_MODULE(OTEL_EXT_MODULE_NAME, m) {
  m.doc() = "otel-ext native recording kernels for the c10d dispatcher ops (see _c10d_native.py)";
  pthread_atfork(nullptr, nullptr, &mark_forked);
  py::class_<Hook, std::shared_ptr<Hook>>(m, "Hook")
      .def(py::init([](const std::vector<std::tuple<int, int, int, int, int, bool, bool, int>>& specs,
                       size_t capacity, py::object ctxvar) {
             std::vector<Spec> s;
             for (const auto& t : specs)
               s.push_back(Spec{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t),
                                std::get<4>(t), std::get<5>(t), std::get<6>(t),
                                std::get<7>(t)});
             return std::make_shared<Hook>(std::move(s), capacity, std::move(ctxvar));
           }),
           py::arg("specs"), py::arg("capacity"), py::arg("context_var"))
      .def("drain", &Hook::drain, py::arg("max_records"), py::arg("timeout_s"))
      .def("flush_window", &Hook::flush_window)
      .def("in_flight", &Hook::in_flight)
      .def("watch_state", &Hook::watch_state)
      .def("dropped", &Hook::dropped)
      .def("invalid", &Hook::invalid)
      .def("issued", &Hook::issued)
      .def("pause", &Hook::pause)
      .def("forked", &Hook::forked)
      .def("set_sink", &Hook::set_sink, py::arg("fd"), py::arg("span_key"),
           py::arg("max_bytes"))
      .def("request_marker", &Hook::request_marker)
      .def("unsent", &Hook::unsent)
      .def("sink_broken", &Hook::sink_broken)
      .def("shutdown", &Hook::shutdown);
  py::class_<Installation>(m, "Installation")
      .def(py::init<std::shared_ptr<Hook>,
                    const std::vector<std::tuple<std::string, std::string,
                                                 std::vector<std::string>>>&,
                    const std::vector<std::string>&, const std::vector<std::string>&>())
      .def("uninstall", &Installation::uninstall);
}
