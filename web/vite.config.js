// The server serves web/dist under /ui/ (src/server/observability_routes.cc).
import { defineConfig } from "vite";

export default defineConfig({
  base: "/ui/",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false },
  server: { proxy: { "/v1": "http://127.0.0.1:8080", "/metrics": "http://127.0.0.1:8080" } },
});
