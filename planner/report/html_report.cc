#include "planner/report/html_report.h"

#include "planner/report/op_table.h"
#include "simulator/taskgraph/step_costs.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "planner/plan/plan_file.h"
#include "simulator/core/error.h"
#include "simulator/core/units.h"
#include "simulator/memory/memory_model.h"
#include "simulator/taskgraph/lowering.h"
#include "simulator/spec/data_dir.h"

namespace trainplan {

namespace {

double r4(double v) { return std::round(v * 1e4) / 1e4; }

nlohmann::json breakdown_json(const TimeBreakdown& b) {
  return {{"compute", r4(b.compute)}, {"tp_comm", r4(b.tp_comm)}, {"ep_comm", r4(b.ep_comm)},
          {"pp_comm", r4(b.pp_comm)}, {"dp_comm", r4(b.dp_comm)}, {"bubble", r4(b.bubble)},
          {"optimizer", r4(b.optimizer)}};
}

std::string read_library() {
  const std::string path = data_dir() + "/third_party/echarts/echarts.min.js";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw_input_error(path, "", "cannot be read", "the report inlines Apache ECharts from the data directory "
                                                  "(TRAINPLAN_DATA_DIR, third_party/echarts)");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

// JSON inside <script type="application/json">: "</" must not close the tag.
std::string script_safe(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') {
      out += "<\\/";
      ++i;
    } else {
      out += json[i];
    }
  }
  return out;
}

// Longest timeline a page carries: beyond it the middle of the steady
// state is left out (the warm-up, the pattern and the cool-down stay), and
// each rank's memory counter is thinned to at most kMaxMemoryPoints (the
// maximum of each bucket, so the peak survives).
constexpr size_t kMaxBoxes = 30000;
constexpr size_t kMaxMemoryPoints = 2000;

double ms3(double us) { return std::round(us) / 1000.0; }

// The Chrome trace as the page draws it: lanes (rank / thread), boxes
// [lane, start ms, end ms, kind, label] with kinds and labels in tables,
// and the memory counter per rank.
nlohmann::json compact_timeline(const std::string& trace_json) {
  const nlohmann::json trace = nlohmann::json::parse(trace_json);
  std::map<int, std::string> procs;
  std::map<std::pair<int, int>, std::string> threads;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "M") continue;
    const std::string what = e.at("name").get<std::string>();
    if (what == "process_name") procs[e.at("pid").get<int>()] = e.at("args").at("name").get<std::string>();
    if (what == "thread_name") {
      threads[{e.at("pid").get<int>(), e.at("tid").get<int>()}] = e.at("args").at("name").get<std::string>();
    }
  }
  std::map<std::pair<int, int>, int> lane_of;
  std::map<std::string, int> kind_of, label_of;
  nlohmann::json lanes = nlohmann::json::array(), kinds = nlohmann::json::array(), labels = nlohmann::json::array();
  struct Box {
    double start, end;
    int lane, kind, label;
  };
  std::vector<Box> boxes;
  std::map<int, std::vector<std::pair<double, double>>> memory;
  auto index = [](std::map<std::string, int>* table, nlohmann::json* list, const std::string& v) {
    auto it = table->find(v);
    if (it != table->end()) return it->second;
    const int i = static_cast<int>(list->size());
    table->emplace(v, i);
    list->push_back(v);
    return i;
  };
  for (const auto& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph").get<std::string>();
    if (ph == "X") {
      const std::pair<int, int> key{e.at("pid").get<int>(), e.at("tid").get<int>()};
      auto it = lane_of.find(key);
      if (it == lane_of.end()) {
        const std::string proc = procs.count(key.first) ? procs[key.first] : "rank " + std::to_string(key.first);
        const std::string thread = threads.count(key) ? threads[key] : std::to_string(key.second);
        it = lane_of.emplace(key, static_cast<int>(lanes.size())).first;
        lanes.push_back(proc + " / " + thread);
      }
      const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
      boxes.push_back(Box{ts, ts + dur, it->second, index(&kind_of, &kinds, e.value("cat", std::string("other"))),
                          index(&label_of, &labels, e.at("name").get<std::string>())});
    } else if (ph == "C") {
      memory[e.at("pid").get<int>()].push_back({e.at("ts").get<double>(), e.at("args").at("GiB").get<double>()});
    }
  }
  size_t omitted = 0;
  if (boxes.size() > kMaxBoxes) {
    // Keep the first two thirds and the last third by start time.
    std::vector<Box> sorted = boxes;
    std::stable_sort(sorted.begin(), sorted.end(), [](const Box& a, const Box& b) { return a.start < b.start; });
    const size_t head = kMaxBoxes * 2 / 3, tail = kMaxBoxes - head;
    omitted = sorted.size() - kMaxBoxes;
    boxes.assign(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(head));
    boxes.insert(boxes.end(), sorted.end() - static_cast<std::ptrdiff_t>(tail), sorted.end());
  }
  nlohmann::json out_boxes = nlohmann::json::array();
  for (const Box& b : boxes) out_boxes.push_back({b.lane, ms3(b.start), ms3(b.end), b.kind, b.label});
  nlohmann::json mem = nlohmann::json::array();
  for (const auto& [pid, pts] : memory) {
    nlohmann::json series = nlohmann::json::array();
    const size_t bucket = (pts.size() + kMaxMemoryPoints - 1) / kMaxMemoryPoints;
    for (size_t i = 0; i < pts.size(); i += bucket) {
      std::pair<double, double> best = pts[i];
      for (size_t k = i; k < std::min(pts.size(), i + bucket); ++k) {
        if (pts[k].second > best.second) best = pts[k];
      }
      series.push_back({ms3(best.first), r4(best.second)});
    }
    mem.push_back({{"rank", procs.count(pid) ? procs[pid] : "rank " + std::to_string(pid)}, {"points", series}});
  }
  return {{"lanes", lanes}, {"kinds", kinds}, {"labels", labels}, {"boxes", out_boxes}, {"memory", mem},
          {"omitted_boxes", omitted}};
}

// The page's script: draws every section present in the data.  Kept here,
// beside the data it reads, so that the two change together.
constexpr const char* kScript = R"JS(
(function () {
  const data = JSON.parse(document.getElementById('trainplan-data').textContent);
  const parts = ['compute', 'tp_comm', 'ep_comm', 'pp_comm', 'dp_comm', 'bubble', 'optimizer'];
  const partNames = {compute: 'compute', tp_comm: 'TP/CP comm', ep_comm: 'MoE all-to-all', pp_comm: 'PP comm',
                     dp_comm: 'DP comm (exposed)', bubble: 'bubble', optimizer: 'optimizer'};
  const colors = {compute: '#4e79a7', tp_comm: '#f28e2b', ep_comm: '#e15759', pp_comm: '#76b7b2',
                  dp_comm: '#59a14f', bubble: '#bab0ac', optimizer: '#edc948', kernel: '#4e79a7',
                  tp_comm_t: '#f28e2b', pp: '#76b7b2', dp: '#59a14f', idle: '#dddddd'};
  let drawn = 0;
  function section(id, title, note) {
    const s = document.createElement('section');
    s.innerHTML = '<h2>' + title + '</h2>' + (note ? '<p class="note">' + note + '</p>' : '');
    document.getElementById('sections').appendChild(s);
    return s;
  }
  function chart(parent, id, height, option, points) {
    const div = document.createElement('div');
    div.id = id;
    div.className = 'chart';
    div.style.height = height + 'px';
    parent.appendChild(div);
    const c = echarts.init(div, null, {renderer: 'canvas'});
    c.setOption(Object.assign({animation: false}, option));
    div.setAttribute('data-points', String(points));
    drawn += 1;
    return c;
  }
  function fmt(v, d) { return (v === undefined || v === null) ? '-' : Number(v).toFixed(d); }

  // ---- ranking ----
  if (data.ranking) {
    const s = section('ranking', 'Ranking', 'Plans ranked by ' + data.ranking.ranked_by +
                      '; the families below lose for the reason given.');
    const t = document.createElement('table');
    let h = '<tr><th>rank</th><th>layout</th><th>plan</th><th>step (s)</th><th>tokens/s</th><th>MFU</th>' +
            '<th>memory (GiB)</th><th>what limits it</th></tr>';
    data.ranking.plans.forEach((p, i) => {
      h += '<tr><td>' + (i + 1) + '</td><td>' + p.label + '</td><td><code>' + p.plan + '</code></td><td>' +
           fmt(p.step_time_s, 3) + '</td><td>' + fmt(p.tokens_per_s, 0) + '</td><td>' + fmt(100 * p.mfu, 1) +
           '%</td><td>' + fmt(p.peak_gib, 1) + '</td><td>' + p.limit + '</td></tr>';
    });
    t.innerHTML = h;
    s.appendChild(t);
    const rows = [{name: '#1 ' + data.ranking.plans[0].label, b: data.ranking.plans[0].breakdown}];
    data.ranking.families.filter(f => f.fits).forEach(f => rows.push({name: f.family, b: f.breakdown}));
    chart(s, 'chart-why', 80 + 34 * rows.length, {
      title: {text: 'Where the step goes: the best plan and the best of each other family (s)', textStyle: {fontSize: 13}},
      tooltip: {trigger: 'axis', axisPointer: {type: 'shadow'}},
      legend: {top: 22},
      grid: {left: 230, right: 30, top: 60, bottom: 30},
      xAxis: {type: 'value', name: 's'},
      yAxis: {type: 'category', data: rows.map(r => r.name), inverse: true},
      series: parts.map(k => ({name: partNames[k], type: 'bar', stack: 'step', itemStyle: {color: colors[k]},
                               data: rows.map(r => r.b[k])}))
    }, rows.length * parts.length);
    const lost = data.ranking.families.filter(f => !f.fits);
    if (lost.length) {
      const ul = document.createElement('ul');
      ul.innerHTML = lost.map(f => '<li><b>' + f.family + '</b>: ' + f.verdict + '</li>').join('');
      s.appendChild(ul);
    }
    const ul2 = document.createElement('ul');
    ul2.innerHTML = data.ranking.families.filter(f => f.fits).map(f => '<li><b>' + f.family + '</b>: ' + f.verdict +
                                                                  '</li>').join('');
    s.appendChild(ul2);
  }

  // ---- the chosen step ----
  if (data.step) {
    const st = data.step;
    const s = section('step', 'The chosen plan\'s step', '<code>' + st.plan + '</code>: ' + fmt(st.step_time_s, 3) +
                      ' s per step, ' + fmt(st.tokens_per_s, 0) + ' tokens/s, MFU ' + fmt(100 * st.mfu, 1) + '%.');
    const kinds = ['weights', 'gradients', 'optimizer', 'activations', 'other'];
    const mcolors = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#bab0ac'];
    chart(s, 'chart-memory', 320, {
      title: {text: 'Memory per GPU by pipeline stage (GiB) against capacity', textStyle: {fontSize: 13}},
      tooltip: {trigger: 'axis'}, legend: {top: 22},
      grid: {left: 60, right: 30, top: 60, bottom: 40},
      xAxis: {type: 'category', name: 'stage', data: st.memory.stages.map(x => String(x.stage))},
      yAxis: {type: 'value', name: 'GiB'},
      series: kinds.map((k, i) => ({name: k, type: 'bar', stack: 'mem', itemStyle: {color: mcolors[i]},
                                    data: st.memory.stages.map(x => x[k]),
                                    markLine: i === 0 ? {symbol: 'none', data: [{yAxis: st.memory.capacity_gib,
                                      name: 'capacity'}], label: {formatter: 'capacity {c} GiB'},
                                      lineStyle: {color: '#c00', type: 'dashed'}} : undefined}))
    }, st.memory.stages.length * kinds.length);

    // One transformer layer's ops, each kind the plan runs (simulate --ops):
    // where a micro-batch's time in it goes, forward to recompute.
    (st.layer_ops || []).filter(k => k.layer === 'dense' || k.layer === 'moe').forEach((k, n) => {
      const ops = k.ops;
      const segs = [['forward', o => o.forward_ms, '#4e79a7'],
                    ['backward (data gradient)', o => o.backward_ms - o.weight_grad_ms, '#76b7b2'],
                    ['weight gradient', o => o.weight_grad_ms, '#59a14f'],
                    ['recompute', o => o.recompute_ms, '#edc948'],
                    ['collective after it', o => (o.collective_forward_ms || 0) + (o.collective_backward_ms || 0),
                     '#f28e2b']];
      const what = (k.layer === 'moe' ? 'an MoE layer' : 'a dense layer') +
                   (k.recomputed === undefined ? '' : (k.recomputed ? ', recomputed' : ', not recomputed'));
      chart(s, 'chart-ops-' + n, 90 + 22 * ops.length, {
        title: {text: 'One micro-batch through ' + what + ' (' + k.layers + ' such layers), by op (ms): forward ' +
                      fmt(k.forward_ms, 3) + ', backward ' + fmt(k.backward_ms, 3) +
                      (k.host_bound ? ', host-bound' : ''), textStyle: {fontSize: 13}},
        tooltip: {trigger: 'axis', axisPointer: {type: 'shadow'}},
        legend: {top: 22},
        grid: {left: 150, right: 30, top: 60, bottom: 30},
        xAxis: {type: 'value', name: 'ms'},
        yAxis: {type: 'category', data: ops.map(o => o.name), inverse: true},
        series: segs.map(([name, f, color]) => ({name: name, type: 'bar', stack: 'op', itemStyle: {color: color},
                                                 data: ops.map(o => Number(f(o).toFixed(6)))}))
      }, ops.length * segs.length);
    });

    // Timeline: one lane per (rank, thread) of the simulated step.
    const tl = st.timeline || {lanes: [], kinds: [], labels: [], boxes: [], memory: []};
    const catColor = c => ({compute: '#4e79a7', optimizer: '#edc948', tp_comm: '#f28e2b', pp_comm: '#76b7b2',
                            dp_comm: '#59a14f', bubble: '#dddddd', wait: '#c7c7c7'}[c] || '#9c755f');
    const kindColors = tl.kinds.map(catColor);
    if (tl.omitted_boxes > 0) {
      const p = document.createElement('p');
      p.className = 'note';
      p.textContent = tl.omitted_boxes + ' slices of the steady state are left out of the timeline (the warm-up, ' +
                      'the repeating pattern and the cool-down are shown).';
      s.appendChild(p);
    }
    chart(s, 'chart-timeline', 90 + 26 * Math.max(1, tl.lanes.length), {
      title: {text: 'Timeline of the step per representative rank (ms); drag or scroll to zoom', textStyle: {fontSize: 13}},
      tooltip: {formatter: p => tl.labels[p.data[4]] + '<br>' + fmt(p.data[1], 3) + ' - ' + fmt(p.data[2], 3) + ' ms'},
      dataZoom: [{type: 'slider', xAxisIndex: 0, bottom: 5, filterMode: 'weakFilter'},
                 {type: 'inside', xAxisIndex: 0, filterMode: 'weakFilter'}],
      grid: {left: 230, right: 30, top: 40, bottom: 50},
      xAxis: {type: 'value', name: 'ms', min: 0},
      yAxis: {type: 'category', data: tl.lanes, inverse: true},
      series: [{type: 'custom', encode: {x: [1, 2], y: 0}, progressive: 0,
                renderItem: function (params, api) {
                  const y = api.value(0), a = api.coord([api.value(1), y]), b = api.coord([api.value(2), y]);
                  const h = api.size([0, 1])[1] * 0.7;
                  const shape = echarts.graphic.clipRectByRect({x: a[0], y: a[1] - h / 2, width: Math.max(0.5, b[0] - a[0]),
                                                                height: h},
                    {x: params.coordSys.x, y: params.coordSys.y, width: params.coordSys.width,
                     height: params.coordSys.height});
                  return shape && {type: 'rect', shape: shape, style: {fill: kindColors[api.value(3)]}};
                },
                data: tl.boxes}]
    }, tl.boxes.length);

    // Memory over time: the simulated memory counter per rank.
    const memSeries = tl.memory.map(m => ({name: m.rank, type: 'line', step: 'end', showSymbol: false, data: m.points}));
    chart(s, 'chart-memory-time', 300, {
      title: {text: 'Memory allocated over the step per representative rank (GiB)', textStyle: {fontSize: 13}},
      tooltip: {trigger: 'axis'}, legend: {top: 22, type: 'scroll'},
      dataZoom: [{type: 'inside'}],
      grid: {left: 60, right: 30, top: 60, bottom: 40},
      xAxis: {type: 'value', name: 'ms'}, yAxis: {type: 'value', name: 'GiB', scale: true},
      series: memSeries
    }, memSeries.reduce((n, x) => n + x.data.length, 0));
  }

  // ---- scaling ----
  if (data.scaling && data.scaling.length) {
    const s = section('scaling', 'Scaling: the best plan of each family by cluster size',
                      'Same global batch at every size; a family that stops scaling is the strategy that breaks first.');
    const fams = {};
    data.scaling.forEach(pt => pt.families.forEach(f => { fams[f.family] = true; }));
    const names = Object.keys(fams).sort();
    const sizes = data.scaling.map(pt => pt.gpus);
    const series = key => names.map(n => ({name: n, type: 'line', connectNulls: false,
      data: data.scaling.map(pt => { const f = pt.families.find(x => x.family === n); return f ? f[key] : null; })}));
    const pts = data.scaling.reduce((n, pt) => n + pt.families.length, 0);
    chart(s, 'chart-scaling', 340, {
      title: {text: 'Throughput (tokens/s) of the best plan of each family', textStyle: {fontSize: 13}},
      tooltip: {trigger: 'axis'}, legend: {top: 22, type: 'scroll'},
      grid: {left: 80, right: 30, top: 60, bottom: 40},
      xAxis: {type: 'category', name: 'GPUs', data: sizes.map(String)}, yAxis: {type: 'value', name: 'tokens/s'},
      series: series('tokens_per_s')
    }, pts);
    chart(s, 'chart-scaling-mfu', 300, {
      title: {text: 'MFU of the best plan of each family (%)', textStyle: {fontSize: 13}},
      tooltip: {trigger: 'axis'}, legend: {top: 22, type: 'scroll'},
      grid: {left: 80, right: 30, top: 60, bottom: 40},
      xAxis: {type: 'category', name: 'GPUs', data: sizes.map(String)}, yAxis: {type: 'value', name: 'MFU %'},
      series: series('mfu_pct')
    }, pts);
  }

  // ---- faults ----
  if (data.faults) {
    const f = data.faults;
    const s = section('faults', 'Faults', f.summary || '');
    if (f.sweep && f.sweep.length) {
      chart(s, 'chart-goodput-interval', 300, {
        title: {text: 'Goodput against the checkpoint interval (the chosen plan)', textStyle: {fontSize: 13}},
        tooltip: {trigger: 'axis'},
        grid: {left: 70, right: 30, top: 50, bottom: 40},
        xAxis: {type: 'log', name: 'interval (s)'}, yAxis: {type: 'value', name: 'goodput %'},
        series: [{type: 'line', data: f.sweep.map(p => [p.interval_s, 100 * p.goodput])}]
      }, f.sweep.length);
    }
    if (f.worlds && f.worlds.length) {
      chart(s, 'chart-fault-worlds', 300, {
        title: {text: 'Goodput and straggler tax against cluster size (best plan of each size)', textStyle: {fontSize: 13}},
        tooltip: {trigger: 'axis'}, legend: {top: 22},
        grid: {left: 70, right: 30, top: 60, bottom: 40},
        xAxis: {type: 'category', name: 'GPUs', data: f.worlds.map(w => String(w.gpus))},
        yAxis: {type: 'value', name: '%'},
        series: [{name: 'goodput %', type: 'line', data: f.worlds.map(w => 100 * w.goodput)},
                 {name: 'straggler tax %', type: 'line', data: f.worlds.map(w => 100 * (w.straggler_tax || 0))}]
      }, 2 * f.worlds.length);
    }
  }
  document.body.setAttribute('data-charts', String(drawn));
  document.body.setAttribute('data-ready', '1');
})();
)JS";

constexpr const char* kStyle = R"CSS(
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.sub, p.note { color: #555; margin-top: 2px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0 16px; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
code { font-size: 11px; }
.chart { width: 100%; max-width: 1400px; margin: 10px 0; }
li { font-size: 13px; margin: 2px 0; }
)CSS";

}  // namespace

nlohmann::json step_section(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                            const StepReport& report) {
  nlohmann::json j;
  j["plan"] = describe_plan(layout.plan);
  j["step_time_s"] = report.step_time_s;
  j["tokens_per_s"] = report.tokens_per_s;
  j["mfu"] = report.mfu;
  j["breakdown"] = breakdown_json(report.breakdown);
  const MemoryReport mem = plan_memory(model, cluster, layout);
  nlohmann::json stages = nlohmann::json::array();
  for (size_t i = 0; i < mem.stages.size(); ++i) {
    const MemoryBreakdown& b = mem.stages[i].breakdown;
    stages.push_back({{"stage", mem.stages[i].stage},
                      {"weights", r4(to_gib(b.weights))},
                      {"gradients", r4(to_gib(b.gradients))},
                      {"optimizer", r4(to_gib(b.optimizer))},
                      {"activations", r4(to_gib(b.activations))},
                      {"other", r4(to_gib(b.other))},
                      {"simulated_peak", i < report.stages.size() ? r4(to_gib(report.stages[i].simulated_peak_bytes)) : 0.0}});
  }
  j["memory"] = {{"capacity_gib", r4(to_gib(mem.capacity_bytes))}, {"stages", stages}};
  j["timeline"] = report.trace_json.empty() ? nlohmann::json::object() : compact_timeline(report.trace_json);
  j["layer_ops"] = op_tables_json(layer_charges(model, cluster, layout.plan), cluster);
  return j;
}

nlohmann::json ranking_section(const SearchResult& r) {
  nlohmann::json j;
  nlohmann::json plans = nlohmann::json::array();
  for (const RankedPlan& p : r.plans) {
    plans.push_back({{"label", plan_label(p.layout.plan)},
                     {"plan", describe_plan(p.layout.plan)},
                     {"step_time_s", p.report.step_time_s},
                     {"tokens_per_s", p.report.tokens_per_s},
                     {"mfu", p.report.mfu},
                     {"peak_gib", r4(to_gib(p.report.peak_memory_bytes))},
                     {"limit", p.limit},
                     {"breakdown", breakdown_json(p.report.breakdown)}});
  }
  j["plans"] = plans;
  nlohmann::json fams = nlohmann::json::array();
  for (const FamilyVerdict& v : r.families) {
    nlohmann::json f = {{"family", v.family}, {"verdict", v.verdict}, {"fits", v.fits}, {"peak_gib", r4(v.peak_gib)}};
    if (v.fits) {
      f["breakdown"] = breakdown_json(v.report.breakdown);
      f["tokens_per_s"] = v.report.tokens_per_s;
      f["mfu"] = v.report.mfu;
    }
    fams.push_back(f);
  }
  j["families"] = fams;
  j["ranked_by"] = "step time";
  return j;
}

nlohmann::json scaling_section(const std::vector<std::pair<int, SearchResult>>& sizes) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [gpus, r] : sizes) {
    nlohmann::json fams = nlohmann::json::array();
    // The winner's family, then every other family with a plan that fits.
    if (!r.plans.empty()) {
      const RankedPlan& best = r.plans.front();
      fams.push_back({{"family", plan_family(best.layout.plan)},
                      {"tokens_per_s", std::round(best.report.tokens_per_s)},
                      {"mfu_pct", r4(100 * best.report.mfu)}});
    }
    for (const FamilyVerdict& v : r.families) {
      if (!v.fits) continue;
      fams.push_back({{"family", v.key},
                      {"tokens_per_s", std::round(v.report.tokens_per_s)},
                      {"mfu_pct", r4(100 * v.report.mfu)}});
    }
    out.push_back({{"gpus", gpus}, {"families", fams}});
  }
  return out;
}

std::string html_report(const nlohmann::json& data) {
  const std::string lib = read_library();
  const std::string title = html_escape(data.value("title", std::string("trainplan report")));
  const std::string subtitle = html_escape(data.value("subtitle", std::string()));
  std::string s;
  s.reserve(lib.size() + (1 << 20));
  s += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + title + "</title>\n";
  s += "<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n";
  s += "<h1>" + title + "</h1>\n<p class=\"sub\">" + subtitle + "</p>\n";
  s += "<div id=\"sections\"></div>\n";
  s += "<script type=\"application/json\" id=\"trainplan-data\">" + script_safe(data.dump()) + "</script>\n";
  s += "<script>/* Apache ECharts 6.1.0, Apache License 2.0 (third_party/echarts) */\n" + lib + "\n</script>\n";
  s += "<script>" + std::string(kScript) + "</script>\n</body>\n</html>\n";
  return s;
}

}  // namespace trainplan
