"""The report page's Jinja2 template (a Python string, so it ships with the package without package data)."""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Night {{ d.night }}: {{ d.verdict }}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.verdict{font-size:1.2em;font-weight:600;padding:.4em .7em;border-radius:4px;display:inline-block}
.bad{background:#ffebee;color:#b71c1c} .good{background:#e8f5e9;color:#1b5e20}
table{border-collapse:collapse;margin:.4em 0} td,th{padding:.2em .6em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th{background:#fafafa} td.num{text-align:right;font-variant-numeric:tabular-nums}
.chip{display:inline-block;padding:0 .5em;border-radius:3px;color:#fff;font-size:.9em}
pre{background:#263238;color:#eceff1;padding:.6em;overflow-x:auto;font-size:12px;max-height:22em}
.none{color:#777;font-style:italic} .key{font-family:monospace;color:#555} .plot{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start}
.legend{font-size:12px} .legend td{padding:0 .4em} details{margin:.3em 0}
code.fetch{user-select:all;background:#f3f3f3;padding:0 .3em;font-size:12px}
</style></head><body>
<h1>Night {{ d.night }}</h1>
<div>{{ d.cadence }} run {{ d.run_id }}{% for k, v in d.environment %} &middot; {{ k }} <code>{{ v }}</code>{% endfor %}</div>
<p id="verdict" class="verdict {{ 'good' if d.verdict.startswith('OK') else 'bad' }}">{{ d.verdict }}</p>

<section id="outcomes"><h2>Outcomes</h2>
<table><tr>{% for o, n in d.counts %}<th><span class="chip" style="background:{{ colors.get(o, '#607d8b') }}">{{ o }}</span></th>{% endfor %}</tr>
<tr>{% for o, n in d.counts %}<td class="num" data-outcome="{{ o }}">{{ n }}</td>{% endfor %}</tr></table>
</section>

{% macro log_ref(path, label) %}{% if fetch(path) %}{{ label }}: <code class="fetch" title="copy and run to print the log">{{ fetch(path) }}</code>{% elif link(path) %}<a href="{{ link(path) }}">{{ label }}</a>{% else %}{{ label }}: <code>{{ path }}</code>{% endif %}{% endmacro %}
<section id="failures"><h2>Failures ({{ d.failures|length }})</h2>
{% for f in d.failures %}
<details open><summary><b>{{ f.test_id }}</b> &mdash; <span class="classification">{{ f.classification }}</span>
{% if f.new %}<b>(new since last night)</b>{% endif %} on {{ f.node or '-' }}, {{ f.attempts }} attempt(s)
{% if f.log_path %}&middot; {{ log_ref(f.log_path, 'full log') }}{% endif %}</summary>
{% if f.log_tail %}<pre>{{ f.log_tail }}</pre>{% else %}<p class="none">no log tail available{% if f.reason %} (reason: {{ f.reason }}){% endif %}</p>{% endif %}
</details>
{% else %}<p class="none">no test failed, hung or passed only on retry</p>{% endfor %}
</section>

<section id="infra"><h2>Infrastructure ({{ d.infra|length }} infra outcome(s), {{ d.bad_nodes|length }} bad node(s))</h2>
{% for f in d.infra %}<p><b>{{ f.test_id }}</b>: {{ f.classification }}{% if not f.node or f.node not in f.classification %} on {{ f.node or '-' }}{% endif %}{% if f.log_path %} &middot; {{ log_ref(f.log_path, 'log') }}{% endif %}</p>
{% else %}<p class="none">no infra errors</p>{% endfor %}
{% for n in d.bad_nodes %}<p class="bad-node"><b>bad node {{ n.node }}</b> ({{ n.rule }}): {{ n.evidence }}</p>
{% else %}<p class="none">no bad nodes</p>{% endfor %}
{% for n in d.suspect_nodes %}<p class="suspect-node"><b>suspect node {{ n.node }}</b> ({{ n.rule }}; avoided and retried from, not named): {{ n.evidence }}</p>
{% endfor %}
</section>

<section id="flaky"><h2>Flaky and quarantined tests ({{ d.flaky|length }})</h2>
{% if d.excused %}<p>Quarantined failures that did not fail the night: {{ d.excused|join(', ') }}</p>{% endif %}
{% if d.flaky %}<table><tr><th>test</th><th>state</th><th>since</th><th>by</th><th>why</th><th>evidence</th></tr>
{% for s in d.flaky %}<tr><td>{{ s.test_id }}</td><td>{{ s.state }}</td><td>{{ s.since }}</td><td>{{ s.by }}</td><td>{{ s.why }}</td>
<td>{% for e in s.evidence %}<div>{{ e.text }}</div>{% endfor %}</td></tr>{% endfor %}</table>
{% else %}<p class="none">no flaky or quarantined tests in history</p>{% endif %}
</section>

<section id="changes"><h2>What changed since the last night</h2>
{% if d.changes %}{% set c = d.changes %}<p>Each test compared with the last night that ran it; the environment with night {{ c.previous }}.</p>
<table>
<tr><th>new failures</th><td>{% for t in c.new_failures %}{{ t }}{% if t in going_in %} (already {{ going_in[t] }} going into the night){% endif %}{{ ', ' if not loop.last }}{% else %}none{% endfor %}</td></tr>
<tr><th>still failing</th><td>{{ c.still_failing|join(', ') or 'none' }}</td></tr>
<tr><th>still failing (not run tonight)</th><td>{{ c.still_failing_not_run|join(', ') or 'none' }}</td></tr>
<tr><th>fixed</th><td>{{ c.fixed|join(', ') or 'none' }}</td></tr>
<tr><th>tests added / removed</th><td>{{ c.added|join(', ') or 'none' }} / {{ c.removed|join(', ') or 'none' }}</td></tr>
</table>
{% if c.est_time %}<table><tr><th>est_time changed</th><th>before</th><th>after</th></tr>
{% for t, a, b in c.est_time %}<tr><td>{{ t }}</td><td class="num">{{ a }}</td><td class="num">{{ b }}</td></tr>{% endfor %}</table>
{% else %}<p class="none">no est_time changes recorded</p>{% endif %}
{% for f, a, b in c.environment %}<p class="env-change"><b>{{ f }}</b> changed: <code>{{ a }}</code> &rarr; <code>{{ b }}</code></p>{% endfor %}
{% if c.comparison %}{% set k = c.comparison %}<p class="comparison">Before/after over {{ k.common }} tests both nights ran:
passed {{ k.passed_before }} &rarr; {{ k.passed_after }}; median duration tonight / last night {{ '-' if k.median_ratio is none else 'x%.2f'|format(k.median_ratio) }}</p>{% endif %}
{% else %}<p class="none">no earlier night to compare with</p>{% endif %}
</section>

<section id="timing"><h2>Makespan and GPU-hours</h2>
<table>{% for k, v in d.makespan %}<tr><th>{{ makespan_label(k) }}</th><td class="num">{{ fmt(v, ' s') }}</td></tr>{% endfor %}
{% if d.usage %}<tr><th>GPU-hours used</th><td class="num">{{ '%.2f'|format(d.usage.used_gpu_h) }}</td></tr>
<tr><th>GPU-hours not used by this night</th><td class="num">{{ '%.2f'|format(d.usage.unused_gpu_h) }}</td></tr>
<tr><th>its tests waited for GPUs other runs held</th><td class="num">{{ 'not recorded' if d.usage.gpu_wait_s is none else fmt(d.usage.gpu_wait_s, ' s') ~ ' (' ~ d.usage.gpu_waits ~ ' attempt(s))' }}</td></tr>
<tr><th>capacity</th><td>{{ d.usage.gpus }} GPUs x {{ fmt(d.usage.makespan_s, ' s') }} ({{ d.usage.source }})</td></tr>{% endif %}
</table>
{% for line in d.prediction %}<p class="prediction">{{ line }}</p>{% endfor %}
</section>

<section id="gantt"><h2>The night as it ran, per node</h2>
{% if gantt %}<div class="plot"><div>{{ gantt|safe }}</div>
<table class="legend"><tr><th>key</th><th>test</th></tr>{% for k, t in legend %}<tr><td class="key">{{ k }}</td><td title="{{ t }}">{{ short(t) }}</td></tr>{% endfor %}</table></div>
<p>{% for o, c in colors.items() %}<span class="chip" style="background:{{ c }}">{{ o }}</span> {% endfor %}</p>
{% else %}<p class="none">no attempts with start times</p>{% endif %}
</section>

<section id="durations"><h2>Durations against est_time</h2>
<div class="plot"><div>{{ durations|safe }}</div>
<table><tr><th>test</th><th>elapsed</th><th>est_time</th><th>ratio</th></tr>
{% for r in ratios %}<tr><td>{{ keys.get(r.test_id, '') }} {{ r.test_id }}</td><td class="num">{{ fmt(r.elapsed_s) }}</td><td class="num">{{ r.est_time }}</td><td class="num">{{ '%.2f'|format(r.elapsed_s / r.est_time) }}</td></tr>
{% else %}<tr><td colspan="4" class="none">no passed test with an est_time</td></tr>{% endfor %}</table></div>
</section>

<section id="drift"><h2>Drift and near-timeout tests</h2>
{% for e in d.drift %}<p class="drift">{{ e.test_id }}: est_time {{ e.registered }} s &rarr; proposed {{ e.registered_proposed }} s ({{ e.reason }})</p>
{% else %}<p class="none">no est_time drifted</p>{% endfor %}
{% for e in d.held %}<p class="drift">{{ e.test_id }}: est_time {{ e.baseline }} s &rarr; {{ e.held }} s held for acceptance (more than max_step_factor in one step; add the test to the repo's calibration: accept: list to apply it)</p>{% endfor %}
{% for n in d.near_timeout %}<p class="near-timeout">{{ n }}</p>
{% else %}<p class="none">no test near its timeout</p>{% endfor %}
</section>

<section id="trends"><h2>Duration trends over the last nights</h2>
{{ trends_plot|safe }}
{% if moved %}<table><tr><th>test</th><th>nights</th><th>last vs median</th><th>trend</th></tr>
{% for t in moved %}<tr><td>{{ t.test_id }}</td><td class="num">{{ t.points|length }}</td><td class="num">{{ 'x%.2f'|format(t.change) if t.change else '-' }}</td><td>{{ sparkline(t)|safe }}</td></tr>{% endfor %}</table>
{% else %}<p class="none">no history for these tests yet</p>{% endif %}
</section>

<section id="coverage"><h2>Uncovered matrix cells</h2>
{% for c in d.uncovered %}<p class="uncovered">{{ c }}</p>{% else %}<p class="none">every declared matrix cell ran</p>{% endfor %}
</section>

<section id="tests"><h2>All tests ({{ d.rows|length }})</h2>
<table><tr><th>test</th><th>outcome</th><th>elapsed</th><th>est_time</th><th>proposed</th><th>timeout</th><th>node</th></tr>
{% for r in d.rows %}<tr><td>{{ r.test_id }}</td><td>{{ r.outcome }}{% if r.attempts > 1 %} (x{{ r.attempts }}){% endif %}{% if r.outcome in ('skipped', 'unplanned') and r.reason %}: {{ r.reason }}{% endif %}</td>
<td class="num">{{ fmt(r.elapsed_s) }}</td><td class="num">{{ r.est_time }}</td><td class="num">{{ fmt(r.proposed) }}</td><td class="num">{{ fmt(r.timeout_s) }}</td><td>{{ r.node }}</td></tr>{% endfor %}
</table></section>

<section id="notes"><h2>Notes</h2>
{% for n in d.notes %}<p>{{ n }}</p>{% else %}<p class="none">no notes</p>{% endfor %}
</section>
</body></html>
"""
