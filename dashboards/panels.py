"""Panel and board primitives for the generated Grafana dashboards (grafana-foundation-sdk):
the selectors every query carries, the 24-column grid, time series, stat, table and heatmap
panels with the thresholds' lines."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.dashboard import DataSourceRef
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from kvscope import catalog as c
from kvscope.config import Config, Slo
from kvscope.promql import ANY, Expr, Matcher, Selector, label_values, metric, quantile
from kvscope.thresholds import Threshold, Thresholds

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
E_BY = ("namespace", "instance", "pod", "target")
G_BY = (*c.DCGM_HOST_LABELS, "gpu")
HOST = "".join(f"{{{{{label}}}}}" for label in c.DCGM_HOST_LABELS)  # legend: whichever is set
RATE = "$__rate_interval"


def _variables(labels: dict[str, str]) -> Selector:
    """label=~"$variable" for each label (Grafana's multi-value variables)."""
    return Selector(tuple(Matcher(label, "=~", f"${variable}") for label, variable in labels.items()))


@dataclass(frozen=True)
class Scope:
    """The selectors every panel's query carries: the board's variables and kvscope.yaml's."""

    engine: Selector
    gpu: Selector
    limits: Thresholds
    own_engine: Selector = ANY  # kvscope.yaml's engine selector alone (gateway, cache series)
    own_gpu: Selector = ANY  # ... and its GPU selector (kvscope export's own GPU series)
    host: str = c.DCGM_HOST_LABELS[0]  # the fleet's dcgm-exporter node label (selectors.gpu_host_label)
    slo: Slo = field(default_factory=Slo)  # kvscope.yaml's objectives, for the attainment tiles

    @classmethod
    def of(cls, config: Config) -> Scope:
        engine = config.engine_selector & _variables(
            {"namespace": "namespace", "instance": "instance", "model_name": "model_name"}
        )
        gpu = config.gpu_selector & _variables({config.gpu_host_label: "hostname", "gpu": "gpu"})
        return cls(
            engine,
            gpu,
            config.thresholds,
            config.engine_selector,
            config.gpu_selector,
            config.gpu_host_label,
            config.slo,
        )

    def ke(self, signal: c.Signal, extra: Selector | None = None) -> Expr:
        """A kvscope serve series (no model_name to filter by): the config's engine selector."""
        return metric(signal, self.own_engine & (extra or Selector()))

    def kg(self, signal: c.Signal, extra: Selector | None = None) -> Expr:
        """A kvscope export GPU series (labelled gpu, not Hostname): the config's GPU selector."""
        return metric(signal, self.own_gpu & (extra or Selector()))

    def line(self, threshold: Threshold) -> Threshold:
        """The effective threshold for a red line."""
        return self.limits[threshold]

    def e(self, signal: c.Signal, extra: Selector | None = None, suffix: str = "") -> Expr:
        return metric(signal, self.engine & (extra or Selector()), suffix)

    def g(self, signal: c.Signal, suffix: str = "") -> Expr:
        return metric(signal, self.gpu, suffix)

    def engine_gauge(self, signal: c.Signal, agg: str = "max") -> Expr:
        """Per-instance gauge, current name first and legacy names after."""
        return self.e(signal).aggregate(agg, E_BY)

    def engine_rate(self, signal: c.Signal, extra: Selector | None = None, by: tuple[str, ...] = E_BY) -> Expr:
        return self.e(signal, extra).rate(RATE).sum(by)

    def rollup(self, record: c.Signal) -> Expr:
        """A per-engine rollup (alerts/rollups.py), the worst engine of each instance: one series
        per engine to read instead of every bucket of a histogram, which a big fleet's dashboard
        cannot afford at each refresh. Blank where the rules are not loaded."""
        return metric(record, self.engine).max(E_BY)

    def quantile(
        self, q: float, signal: c.Signal, by: tuple[str, ...] = E_BY, selector: Selector | None = None
    ) -> Expr:
        return quantile(q, signal, window=RATE, by=by, selector=self.engine if selector is None else selector)


@dataclass
class Board:
    """Accumulates panels with unique ids; `add` places them on the 24-column grid."""

    title: str
    uid: str
    description: str
    tags: list[str]
    builder: Any = None
    next_id: int = 1
    variables: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.builder = (
            db.Dashboard(self.title)
            .uid(self.uid)
            .description(self.description)
            .tags(["kvscope", *self.tags])
            .refresh("30s")
            .time("now-1h", "now")
            .timezone("browser")
            .editable()
            .tooltip(model.DashboardCursorSync.CROSSHAIR)
        )
        self.builder.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))

    def query_variable(self, name: str, label: str, query: str) -> Board:
        self.builder.with_variable(
            db.QueryVariable(name)
            .label(label)
            .datasource(DS)
            .query(query)
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .all_value(".*")
            .multi(True)
            .current(model.VariableOption(selected=True, text="All", value="$__all"))
        )
        self.variables.append(name)
        return self

    def row(self, title: str) -> Board:
        self.builder.with_row(db.Row(title).id(self._id()))
        return self

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def add(self, panel: Any, span: int = 12, height: int = 8) -> Board:
        self.builder.with_panel(panel.id(self._id()).span(span).height(height).datasource(DS))
        return self

    def build(self) -> model.Dashboard:
        return self.builder.build()


Query = tuple[Expr | str, str]  # (expression, legend)


def _targets(panel: Any, queries: Sequence[Query], instant: bool = False, fmt: PromQueryFormat | None = None) -> Any:
    for i, (expr, legend) in enumerate(queries):
        q = prometheus.Dataquery().expr(str(expr)).legend_format(legend).ref_id(chr(ord("A") + i))
        if instant:
            q = q.instant()
        if fmt:
            q = q.format(fmt)
        panel = panel.with_target(q)
    return panel


def _thresholds(lines: Sequence[tuple[Threshold | float, str]], base: str = "green") -> Any:
    steps = [model.Threshold(value=None, color=base)]
    steps += [
        model.Threshold(value=line.value if isinstance(line, Threshold) else line, color=color) for line, color in lines
    ]
    return db.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)


def ts(
    title: str,
    unit: str,
    queries: Sequence[Query],
    description: str = "",
    lines: Sequence[tuple[Threshold | float, str]] = (),
    stack: bool = False,
) -> Any:
    """A time series panel; `lines` are drawn as threshold lines (the alerts' and diagnosis' limits)."""
    panel = timeseries.Panel().title(title).description(description).unit(unit).fill_opacity(10).line_width(1)
    panel = panel.thresholds(_thresholds(lines))
    if lines:
        panel = panel.thresholds_style(_line_style())
    if stack:
        panel = panel.stacking(_stacking())
    return _targets(panel, queries)


def _line_style() -> Any:
    from grafana_foundation_sdk.builders import common as common_builders

    return common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE)


def _stacking() -> Any:
    from grafana_foundation_sdk.builders import common as common_builders

    return common_builders.StackingConfig().mode(common.StackingMode.NORMAL)


def st(
    title: str,
    unit: str,
    expr: Expr,
    description: str = "",
    lines: Sequence[tuple[Threshold | float, str]] = (),
    base: str = "green",
) -> Any:
    panel = stat.Panel().title(title).description(description).unit(unit).thresholds(_thresholds(lines, base))
    return _targets(panel, [(expr, "")])


def tbl(title: str, queries: Sequence[Query], description: str = "", unit: str = "short") -> Any:
    panel = table.Panel().title(title).description(description).unit(unit).thresholds(_thresholds(()))
    return _targets(panel, queries, instant=True, fmt=PromQueryFormat.TABLE)


def hm(title: str, expr: Expr, description: str = "", unit: str = "short") -> Any:
    panel = heatmap.Panel().title(title).description(description).unit(unit).thresholds(_thresholds(()))
    return _targets(panel, [(expr, "{{le}}")], fmt=PromQueryFormat.HEATMAP)


def _engine_variables(board: Board) -> Board:
    running = metric(c.VLLM_REQUESTS_RUNNING)
    in_namespace = metric(c.VLLM_REQUESTS_RUNNING, _variables({"namespace": "namespace"}))
    return (
        board.query_variable("namespace", "Namespace", label_values(running, "namespace"))
        .query_variable("instance", "Instance / pod", label_values(in_namespace, "instance"))
        .query_variable("model_name", "Model", label_values(running, "model_name"))
    )


def _gpu_variables(board: Board, host: str = c.DCGM_HOST_LABELS[0]) -> Board:
    # framebuffer use: on every default list, MIG instances included (they have no GPU_UTIL), under
    # 4.8's name and 4.9's
    util = metric(c.DCGM_FB_USED)
    on_host = metric(c.DCGM_FB_USED, _variables({host: "hostname"}))
    return board.query_variable("hostname", "Node", label_values(util, host)).query_variable(
        "gpu", "GPU", label_values(on_host, "gpu")
    )
