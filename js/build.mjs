// Bundles the dashboard into workbench/assets/build/ (not committed: `make` and the package
// build run this). Two entry points share one view (src/view.js):
//   dashboard.js  an ES module for anywidget: the live chart while a run trains;
//   page.js       a classic script (IIFE) embedded in a run's saved output, so the finished
//                 chart stays interactive wherever scripts run and falls back to a picture
//                 where they do not.
// uPlot's stylesheet is bundled as text and injected once per page by the view.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";

const out = fileURLToPath(new URL("../workbench/assets/build/", import.meta.url));
const common = { bundle: true, minify: true, target: "es2020", loader: { ".css": "text" },
  legalComments: "eof", logLevel: "warning" };
await build({ ...common, entryPoints: ["src/widget.js"], format: "esm", outfile: `${out}dashboard.js` });
await build({ ...common, entryPoints: ["src/page.js"], format: "iife", outfile: `${out}page.js` });
