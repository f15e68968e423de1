"""The web page's streaming cost, in Debian's Chromium driven by Playwright.

Run: ``python benchmarks/bench_page.py``. Starts ``ketch serve`` (a scripted model), opens
the page and feeds one assistant message to the page's renderer, 180 characters a chunk
(two chunks a paragraph, then a blank line), each chunk rendered and laid out as a frame
would (``flushRendering()`` then a forced layout). Reports the median time per chunk
(of 5 batches of 60 chunks) once 1k, 10k and 100k characters are shown: the page renders a finished paragraph once,
so the 100k figure must stay within 2x of the 1k one (it grew 25x before).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "server"))

from serverhelp import TOKEN
from serverhelp import start_serve

MEASURE = """
() => {
  const root = document.createElement("div");
  document.getElementById("transcript").append(root);
  const view = new View(root);
  view.handle({type: "message_start", message: {role: "assistant", content: []}});
  const paragraph = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. ".repeat(2);
  const pieces = [paragraph.slice(0, 90), paragraph.slice(90), "\\n\\n"];
  const times = {};
  const t = document.getElementById("transcript");
  const chunk = (piece) => {
    view.handle({type: "message_update", event: {type: "text_delta", index: 0, delta: piece}});
    if (typeof flushRendering === "function") flushRendering();
    t.scrollTop = t.scrollHeight;
    void document.body.offsetHeight;  // lay it out, as the frame would
  };
  let shown = 0;
  let n = 0;
  const next = () => { const piece = pieces[n++ % 3]; chunk(piece); shown += piece.length; };
  const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  for (const mark of [1000, 10000, 100000]) {
    while (shown < mark) next();
    const runs = [];
    for (let r = 0; r < 5; r++) {  // 5 batches of 60 chunks (20 paragraphs): the timer is coarse
      const start = performance.now();
      for (let i = 0; i < 60; i++) next();
      runs.push((performance.now() - start) / 60);
    }
    times[mark] = runs;
  }
  return Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
}
"""


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        served = start_serve(Path(folder))
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1200, "height": 800})
                page.goto(f"{served.url}/?token={TOKEN}")
                page.wait_for_selector("body[data-ready]", state="attached")
                result = page.evaluate(MEASURE)
                browser.close()
        finally:
            served.stop()
    print(json.dumps({f"ms_per_chunk_at_{k}_chars": round(v, 3) for k, v in result.items()}))
    ratio = result["100000"] / result["1000"]
    print(f"100k / 1k: {ratio:.2f}x")


if __name__ == "__main__":
    main()
