// Reads the documentation (README.md and docs/*.md) for the tests that run
// its examples and check its links: fenced code blocks with their page and
// line, headings as GitHub turns them into anchors, and relative links.

import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';

import { repoRoot } from './stack.mjs';

/** The pages, relative to the repository root: README.md first, then docs/ in name order. */
export function pages() {
  const docs = readdirSync(path.join(repoRoot, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs];
}

/** The text of a page. */
export function read(page) {
  return readFileSync(path.join(repoRoot, page), 'utf8');
}

/**
 * The fenced code blocks of a page, in order: { page, line, lang, code },
 * line being the 1-based line of the opening fence. Only blocks fenced at
 * the start of a line with three backticks count; indented ones are text.
 */
export function codeBlocks(page) {
  const blocks = [];
  const lines = read(page).split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i]);
    if (!open) continue;
    const start = i;
    const body = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) body.push(lines[i]);
    blocks.push({ page, line: start + 1, lang: open[1], code: body.join('\n') + '\n' });
  }
  return blocks;
}

/** The page's text with its fenced code blocks blanked out, lines kept. */
function prose(text) {
  return text.replace(/^```\w*\s*\n[\s\S]*?^```\s*$/gm, (block) => block.replace(/[^\n]/g, ''));
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading) {
  return heading
    .trim()
    .toLowerCase()
    .replace(/`/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of a page's headings, with GitHub's -1, -2 suffixes for repeats. */
export function anchors(page) {
  const seen = new Map();
  const out = new Set();
  for (const [, text] of prose(read(page)).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = slug(text);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The relative links of a page's prose (not of its code): { page, line, target }. */
export function relativeLinks(page) {
  const links = [];
  prose(read(page))
    .split('\n')
    .forEach((text, i) => {
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
        links.push({ page, line: i + 1, target });
      }
    });
  return links;
}
