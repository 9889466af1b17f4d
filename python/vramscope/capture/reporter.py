"""What a capture says about its leaks: the live monitor's lines at each step end, who holds each leak
it confirms (searched then, on the training thread, while the loop's frames and locals live), and
the report at the end (the analysis, every leak's owners in OUT.owners.json, the summary)."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from .. import _core
from .say import say, warn

if TYPE_CHECKING:
    from ..owners.paths import OwnerPath


class LiveReporter:
    def __init__(self, *, device_type: str, live_warnings: bool, explain: bool, explain_budget: float):
        self.device_type = device_type  # "cpu": a live-tensor capture, whose blocks have no device number
        self.live_warnings = live_warnings
        self.explain = explain
        self.explain_budget = explain_budget  # seconds one owner search may take
        self.live_owners: list[dict[str, Any]] = []  # owners.leaks.explained(), one per site confirmed live
        self.within_owners: list[dict[str, Any]] = []  # the same, of leaks inside a step, found at their highest point
        self.within_told: list[dict[str, Any]] = []  # the leaks inside a step said so far, one per site
        self.findings: dict[str, Any] | None = None
        self.owners: list[dict[str, Any]] = []
        self.leaked: bool | None = None
        self.text = ""  # the summary and owners as the end of the trace said them

    def spoken(self, live: dict[str, Any]) -> str:
        """The monitor's line, with the device spelled as this source records it."""
        if self.device_type == "cpu":
            return str(live["line"]).replace(f"(cuda:{live['device']}", "(cpu live tensors", 1)
        return str(live["line"])

    def tell(self, said: list[dict[str, Any]]) -> None:
        """What the monitor said at a step end, spelled for this source (and printed with live_warnings)."""
        for live in said:
            live["line"] = self.spoken(live)
            if self.live_warnings:
                say(live["line"])

    def explain_live(self, confirmed: list[dict[str, Any]], step: int,
                     own_work: Callable[[], ContextManager[None]]) -> None:
        """At the step leaks are confirmed: one search per new site, within the budget, outside the
        run's own memory (`own_work`); the answer is kept for the end (when main()'s locals may be gone)."""
        if not self.explain:
            return
        from ..owners.leaks import explained, same_site

        for live in confirmed:
            answer = explained(live, *self._search_live(live, own_work), step)
            self.live_owners = [e for e in self.live_owners if not same_site(e, answer)] + [answer]
            if self.live_warnings:
                say(f"  held by {answer['owner_lines'][0]}" if answer["owner_lines"] else f"  {answer['note']}")

    def tell_within_step(self, rising: list[dict[str, Any]]) -> None:
        """A leak inside a step, said the first time its site rises across a step's units."""
        from ..owners.leaks import same_site

        for live in rising:
            live["line"] = self.spoken(live)
            if not any(same_site(told, live) for told in self.within_told):
                self.within_told.append(live)
                if self.live_warnings:
                    say(live["line"])

    def explain_within_step(self, rising: list[dict[str, Any]], step: int,
                            own_work: Callable[[], ContextManager[None]], unit: str) -> None:
        """At a leak inside a step's highest point (analysis/within_step.h), its units done or enough
        of them: who holds what each unit of a site rising across them kept, once per site; the
        analysis at the end names the leak, and these answers join it."""
        if not self.explain:
            return
        from ..owners.leaks import explained, same_site

        for live in rising:
            if not any(same_site(e, live) for e in self.within_owners):
                self.within_owners.append({**explained(live, *self._search_live(live, own_work), step), "unit": unit})

    def _search_live(self, live: dict[str, Any],
                     own_work: Callable[[], ContextManager[None]]) -> tuple[list[OwnerPath], str]:
        """Who holds a live finding's blocks now, within the budget, outside the run's own memory."""
        from ..owners.leaks import owners_of_blocks

        try:
            with own_work():
                return owners_of_blocks(live, live["blocks"], budget=self.explain_budget, device_type=self.device_type)
        except Exception as e:  # never the run's problem
            return [], f"the owner search failed ({type(e).__name__}: {e})"

    def report(self, path: str, analyse: Callable[[], tuple[str, str]] | None, leaking: list[dict[str, Any]],
               print_it: bool, end_searches: float) -> None:
        """Finds who holds each leak while the run's objects still live (written beside the trace as
        OUT.owners.json) and, with `analyse`, analyses the trace: the only analysis of this trace in
        this process. Without it (under `vramscope run`, whose launcher analyses each trace once) the
        leaks are the live monitor's last word (`leaking`), which the judge makes the same as the
        final table."""
        if analyse is not None:
            try:
                text, findings = analyse()
                self.findings = json.loads(findings)
                self.leaked = self.findings["verdict"] == _core.Verdict.leak.spelling
            except Exception as e:
                return warn(f"could not analyse {path}, so the verdict is unknown (not 'no leak'): {e}")
            leaks = self.findings["leaks"]
        else:
            text = "".join(f"vramscope: {f['line']}\n" for f in leaking)
            # The monitor's line is a leak as the findings spell one (its memory and library too).
            from ..owners.targets import pooled

            # A pool's blocks come oldest first, as the findings keep them; the others newest first.
            leaks = [{**f, "live_blocks": [list(b) for b in (f["blocks"] if pooled(f) else reversed(f["blocks"]))]}
                     for f in leaking]
        if (leaks or self.within_owners) and self.explain:
            self._write_owners(path, leaks, end_searches)
        from ..owners.leaks import render_owners

        self.text = text + (render_owners(self.owners) if self.owners else "")
        if print_it:
            print(self.text, file=sys.stderr, end="", flush=True)
            say(f"trace written to {path}  (vramscope analyze {path})")

    def _write_owners(self, path: str, leaks: list[dict[str, Any]], end_searches: float) -> None:
        try:
            self.owners = self._owners_now_or_then(leaks, end_searches) + self.within_owners
            if self.findings is not None:  # the one join of owners to findings (findings/json_reader.h)
                self.findings = json.loads(_core.attach_owners(json.dumps(self.findings), json.dumps(self.owners)))
            with open(path + ".owners.json", "w") as f:
                json.dump(self.owners, f, indent=1)
        except Exception as e:
            warn(f"could not find who holds the leaks ({type(e).__name__}: {e})", "owners")

    def _owners_now_or_then(self, leaks: list[dict[str, Any]], end_searches: float) -> list[dict[str, Any]]:
        """Every leak's owners, largest first, as they are now; where none is found now (main() has
        returned) or the budget went to larger leaks, the answer found live, at the step the leak
        was confirmed. The searches together take at most `end_searches` budgets."""
        from ..owners.leaks import blocks_to_try, explained, owners_of_blocks, same_site

        deadline = time.monotonic() + end_searches * self.explain_budget
        out = []
        for leak in sorted(leaks, key=lambda leak: -leak["bytes_per_step"]):
            blocks = blocks_to_try(leak)
            left = deadline - time.monotonic()
            if left > 0:
                owners, note = owners_of_blocks(leak, blocks, budget=min(self.explain_budget, left),
                                                device_type=self.device_type)
            else:
                owners, note = [], (f"not searched at the end: the {end_searches * self.explain_budget:.1f} s "
                                    "budget went to larger leaks (VRAMSCOPE_EXPLAIN_BUDGET)")
            now = explained(leak, owners, note)
            then = next((e for e in self.live_owners if same_site(e, now) and e["owners"]), None)
            # A cycle found now may only be what the training function left when it returned: what
            # a root reached while the run went on says who kept the memory then.
            reached_now = any(o.kind == "reachable" for o in owners)
            out.append(now if reached_now or then is None else {**then, "bytes_per_step": leak["bytes_per_step"]})
        return out
