/**
 * The kernel view as plain DOM: payload -> HTMLElement.
 *
 * No JupyterLab imports here, so the whole view is unit-tested in jsdom
 * (tests/view.test.ts). The MIME renderer (mime.ts) only wraps the element in a
 * Lumino widget. Text always goes in through `textContent`, never `innerHTML`:
 * the payload comes from a notebook, which may be untrusted.
 *
 * The template and specialized IR share one grid, one row per aligned pair of lines, so the two sides stay
 * row-aligned (and scroll together) while long lines wrap. Lines that came from a line of the kernel's source
 * are linked (linemap.ts): hovering one highlights what the same source line became in every section (and the
 * source line in the notebook cell, through a bubbling event the notebook plugin handles); clicking pins it.
 */

import {
  alignedRows,
  alignLines,
  changedLineNumbers,
  changedRanges,
  ILineAlignment,
  splitLines
} from './diff';
import { splitByRanges, tokenizeLine } from './highlight';
import {
  ISourceHighlightDetail,
  ISourceHoverDetail,
  mappedLines,
  originsOf,
  SOURCE_HIGHLIGHT_EVENT,
  SOURCE_HOVER_EVENT,
  sourceMatches
} from './linemap';
import { findSection, IKernelSection, IKernelView, parsePayload } from './payload';

/** Order of the section tabs after the side-by-side IR tab; unknown ids follow in payload order. */
const SECTION_ORDER = ['plan', 'lowered', 'cuda', 'ptx', 'sass'];

/** The id of the side-by-side tab. */
export const IR_TAB_ID = 'ir';

type Doc = Document;

function el<K extends keyof HTMLElementTagNameMap>(
  doc: Doc,
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = doc.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** `49152` -> `48 KiB`; `100` -> `100 B`. */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) {
    return `${bytes} B`;
  }
  const kib = bytes / 1024;
  if (kib < 1024) {
    return `${Number.isInteger(kib) ? kib : kib.toFixed(1)} KiB`;
  }
  const mib = kib / 1024;
  return `${Number.isInteger(mib) ? mib : mib.toFixed(1)} MiB`;
}

/** Milliseconds with about three significant digits: `0.0123 ms`, `4.56 ms`, `1234 ms`. */
export function formatMs(ms: number): string {
  if (ms >= 100) {
    return `${Math.round(ms)} ms`;
  }
  return `${Number(ms.toPrecision(3))} ms`;
}

/** A maximum absolute error in short scientific form: `1.9e-6`, or `0` when exact. */
export function formatError(value: number): string {
  if (value === 0) {
    return '0';
  }
  const [mantissa, exponent] = value.toExponential(1).split('e');
  return `${mantissa}e${Number(exponent)}`;
}

interface ILineOptions {
  changed: Set<number>;
  /** Changed character ranges per 1-based line number. */
  ranges: Map<number, Array<[number, number]>>;
}

/** One line: its number and its highlighted text; `data-section` and `data-line` name it for the line mapping. */
function renderLine(
  doc: Doc,
  sectionId: string,
  number: number,
  line: string,
  language: string,
  options: ILineOptions
): HTMLElement {
  const row = el(doc, 'div', `tnb-line tnb-side-${sectionId}`);
  row.dataset.section = sectionId;
  row.dataset.line = String(number);
  if (options.changed.has(number)) {
    row.classList.add('tnb-changed');
  }
  row.appendChild(el(doc, 'span', 'tnb-lineno', String(number)));
  const body = el(doc, 'span', 'tnb-text');
  const pieces = splitByRanges(tokenizeLine(line, language), options.ranges.get(number) ?? []);
  for (const piece of pieces) {
    if (piece.kind === null && !piece.changed) {
      body.appendChild(doc.createTextNode(piece.text));
      continue;
    }
    const span = el(doc, 'span', undefined, piece.text);
    if (piece.kind !== null) {
      span.classList.add(`tnb-tok-${piece.kind}`);
    }
    if (piece.changed) {
      span.classList.add('tnb-word-changed');
    }
    body.appendChild(span);
  }
  if (line.length === 0) {
    // Keep empty lines one line tall.
    body.appendChild(doc.createTextNode('\u200b'));
  }
  row.appendChild(body);
  return row;
}

/** One code block with line numbers; lines in `options.changed` (1-based) get `tnb-changed`. */
export function renderCode(
  doc: Doc,
  text: string,
  language: string,
  options: ILineOptions = { changed: new Set(), ranges: new Map() },
  sectionId = 'code'
): HTMLElement {
  const code = el(doc, 'div', 'tnb-code');
  code.tabIndex = 0;
  code.dataset.language = language;
  splitLines(text).forEach((line, index) => {
    code.appendChild(renderLine(doc, sectionId, index + 1, line, language, options));
  });
  return code;
}

function renderPane(doc: Doc, section: IKernelSection, code: HTMLElement, role: string): HTMLElement {
  const pane = el(doc, 'div', `tnb-pane tnb-pane-${role}`);
  pane.dataset.section = section.id;
  const header = el(doc, 'div', 'tnb-pane-header');
  header.appendChild(el(doc, 'span', 'tnb-pane-title', section.title));
  if (section.note) {
    header.appendChild(el(doc, 'span', 'tnb-note', section.note));
  }
  pane.appendChild(header);
  pane.appendChild(code);
  return pane;
}

/** The changed-line sets and word ranges of both sides, from the alignment and the payload. */
export function computeChanges(
  template: IKernelSection,
  specialized: IKernelSection
): { alignment: ILineAlignment; left: ILineOptions; right: ILineOptions } {
  const a = splitLines(template.text);
  const b = splitLines(specialized.text);
  const alignment = alignLines(a, b);
  // The payload's changed_lines are authoritative for the specialized side.
  const rightChanged = new Set(
    (specialized.changedLines ?? changedLineNumbers(alignment.bChanged)).filter(n => n <= b.length)
  );
  const leftChanged = new Set(changedLineNumbers(alignment.aChanged));
  const left: ILineOptions = { changed: leftChanged, ranges: new Map() };
  const right: ILineOptions = { changed: rightChanged, ranges: new Map() };
  for (const number of rightChanged) {
    const partner = alignment.bToA[number - 1];
    if (partner >= 0 && a[partner] !== b[number - 1]) {
      right.ranges.set(number, changedRanges(a[partner], b[number - 1]));
      if (leftChanged.has(partner + 1)) {
        left.ranges.set(partner + 1, changedRanges(b[number - 1], a[partner]));
      }
    }
  }
  return { alignment, left, right };
}

function paneHeader(doc: Doc, section: IKernelSection, role: string): HTMLElement {
  const header = el(doc, 'div', `tnb-pane-header tnb-pane-${role}`);
  header.dataset.section = section.id;
  header.appendChild(el(doc, 'span', 'tnb-pane-title', section.title));
  if (section.note) {
    header.appendChild(el(doc, 'span', 'tnb-note', section.note));
  }
  return header;
}

/** The side-by-side template/specialized panel, or a single pane when one side is missing. */
export function renderIrPanel(doc: Doc, view: IKernelView): HTMLElement {
  const panel = el(doc, 'div', 'tnb-ir');
  const template = findSection(view, 'template');
  const specialized = findSection(view, 'specialized');
  if (!template || !specialized) {
    const only = template ?? specialized;
    if (!only) {
      panel.appendChild(el(doc, 'div', 'tnb-message', 'This payload has neither template nor specialized IR.'));
      return panel;
    }
    const missing = template ? 'specialized (phase 2)' : 'template (phase 1)';
    panel.appendChild(el(doc, 'div', 'tnb-message', `No ${missing} IR in this payload; showing ${only.title}.`));
    const split = el(doc, 'div', 'tnb-split tnb-split-single');
    const changed = new Set(only.changedLines ?? []);
    const code = renderCode(doc, only.text, only.language, { changed, ranges: new Map() }, only.id);
    split.appendChild(renderPane(doc, only, code, only.id));
    panel.appendChild(split);
    return panel;
  }

  const { alignment, left, right } = computeChanges(template, specialized);
  const toolbar = el(doc, 'div', 'tnb-ir-toolbar');
  const count = right.changed.size;
  toolbar.appendChild(
    el(
      doc,
      'span',
      'tnb-ir-summary',
      count === 0
        ? 'Specialization changed no lines.'
        : `${count} line${count === 1 ? '' : 's'} changed by specialization`
    )
  );
  panel.appendChild(toolbar);

  // One grid: a header row, then a row per aligned pair (a side without a line gets a filler).
  const grid = el(doc, 'div', 'tnb-code tnb-aligned');
  grid.tabIndex = 0;
  grid.appendChild(paneHeader(doc, template, 'template'));
  grid.appendChild(paneHeader(doc, specialized, 'specialized'));
  const a = splitLines(template.text);
  const b = splitLines(specialized.text);
  for (const [i, j] of alignedRows(alignment)) {
    grid.appendChild(
      i >= 0
        ? renderLine(doc, template.id, i + 1, a[i], template.language, left)
        : el(doc, 'div', `tnb-line tnb-filler tnb-side-${template.id}`)
    );
    grid.appendChild(
      j >= 0
        ? renderLine(doc, specialized.id, j + 1, b[j], specialized.language, right)
        : el(doc, 'div', `tnb-line tnb-filler tnb-side-${specialized.id}`)
    );
  }
  panel.appendChild(grid);
  return panel;
}

function renderSectionPanel(doc: Doc, section: IKernelSection): HTMLElement {
  const panel = el(doc, 'div', 'tnb-section');
  const changed = new Set(section.changedLines ?? []);
  const code = renderCode(doc, section.text, section.language, { changed, ranges: new Map() }, section.id);
  const split = el(doc, 'div', 'tnb-split tnb-split-single');
  split.appendChild(renderPane(doc, section, code, section.id));
  panel.appendChild(split);
  return panel;
}

function renderSummary(doc: Doc, view: IKernelView): HTMLElement {
  const summary = el(doc, 'div', 'tnb-summary');
  const title = el(doc, 'div', 'tnb-title');
  title.appendChild(el(doc, 'span', 'tnb-name', view.name));
  const backend = el(doc, 'span', 'tnb-badge tnb-backend', view.backend ?? 'not compiled');
  backend.title = 'backend';
  if (view.backend === null) {
    backend.classList.add('tnb-backend-none');
  }
  title.appendChild(backend);
  if (view.consts.length) {
    const consts = el(doc, 'span', 'tnb-consts');
    for (const [name, value] of view.consts) {
      consts.appendChild(el(doc, 'span', 'tnb-const', `${name}=${value}`));
    }
    title.appendChild(consts);
  }
  summary.appendChild(title);

  if (view.params.length) {
    const params = el(doc, 'div', 'tnb-params');
    for (const param of view.params) {
      const chip = el(doc, 'span', `tnb-param tnb-param-${param.kind.replace(/[^\w-]/g, '')}`);
      chip.title = param.kind;
      chip.appendChild(el(doc, 'span', 'tnb-param-name', param.name));
      if (param.annotation) {
        // `int = 128` reads `block_M: int = 128`; a bare default `= 128` reads `block_M = 128`.
        const separator = param.annotation.startsWith('=') ? ' ' : ': ';
        chip.appendChild(el(doc, 'span', 'tnb-param-annotation', `${separator}${param.annotation}`));
      }
      params.appendChild(chip);
    }
    summary.appendChild(params);
  }

  const facts: string[] = [];
  if (view.resources) {
    const r = view.resources;
    if (r.registers !== null) {
      facts.push(`${r.registers} registers/thread`);
    }
    if (r.sharedBytes !== null) {
      facts.push(`${formatBytes(r.sharedBytes)} shared`);
    }
    if (r.spillStores !== null || r.spillLoads !== null) {
      facts.push(`spills ${r.spillStores ?? '?'} st / ${r.spillLoads ?? '?'} ld`);
    }
  }
  if (view.run) {
    const err = view.run.maxAbsErr === null ? '' : `, max |err| ${formatError(view.run.maxAbsErr)}`;
    facts.push(`ran on ${view.run.device}${err}`);
  }
  if (facts.length) {
    summary.appendChild(el(doc, 'div', 'tnb-facts', facts.join(' · ')));
  }
  if (view.notes.length) {
    const notes = el(doc, 'div', 'tnb-notes');
    notes.setAttribute('role', 'note');
    for (const note of view.notes) {
      notes.appendChild(el(doc, 'div', 'tnb-view-note', note));
    }
    summary.appendChild(notes);
  }
  if (view.timingsMs.length) {
    const timings = el(doc, 'div', 'tnb-timings');
    const total = view.timingsMs.reduce((sum, [, ms]) => sum + ms, 0);
    for (const [stage, ms] of view.timingsMs) {
      const item = el(doc, 'span', 'tnb-timing', `${stage} ${formatMs(ms)}`);
      item.title = `${((100 * ms) / (total || 1)).toFixed(0)}% of ${formatMs(total)}`;
      timings.appendChild(item);
    }
    summary.appendChild(timings);
  }
  return summary;
}

interface ITab {
  id: string;
  title: string;
  /** The sections the tab shows (for the line-mapping counts on its button). */
  sections: string[];
  render: () => HTMLElement;
}

/** The tabs in display order: the side-by-side IR first, then the other sections. */
export function tabsFor(doc: Doc, view: IKernelView): ITab[] {
  const tabs: ITab[] = [];
  if (findSection(view, 'template') || findSection(view, 'specialized')) {
    tabs.push({
      id: IR_TAB_ID,
      title: 'Template ↔ Specialized',
      sections: ['template', 'specialized'],
      render: () => renderIrPanel(doc, view)
    });
  }
  const rest = view.sections.filter(s => s.id !== 'template' && s.id !== 'specialized');
  const rank = (id: string) => {
    const index = SECTION_ORDER.indexOf(id);
    return index < 0 ? SECTION_ORDER.length : index;
  };
  // Array.prototype.sort is stable, so unknown ids keep their payload order.
  rest.sort((x, y) => rank(x.id) - rank(y.id));
  for (const section of rest) {
    tabs.push({
      id: section.id,
      title: section.title,
      sections: [section.id],
      render: () => renderSectionPanel(doc, section)
    });
  }
  return tabs;
}

/**
 * Render a kernel view payload (any JSON value) into a new element.
 *
 * Never throws for a malformed payload: it shows a short message instead.
 * Tab panels are built when first selected, so large PTX/SASS cost nothing
 * until looked at.
 */
export function renderKernelView(raw: unknown, doc: Doc = document): HTMLElement {
  const root = el(doc, 'div', 'tnb-kernel-view');
  let parsed;
  try {
    parsed = parsePayload(raw);
  } catch (error) {
    // parsePayload does not throw by design; this guards against a bug in it.
    parsed = { view: null, warnings: [`Could not read the kernel view payload: ${String(error)}`] };
  }
  const { view, warnings } = parsed;
  if (warnings.length) {
    const box = el(doc, 'div', 'tnb-warnings');
    box.setAttribute('role', 'note');
    for (const warning of warnings) {
      box.appendChild(el(doc, 'div', 'tnb-warning', warning));
    }
    root.appendChild(box);
  }
  if (!view) {
    root.classList.add('tnb-invalid');
    return root;
  }
  if (view.version !== null) {
    root.dataset.version = String(view.version);
  }
  root.appendChild(renderSummary(doc, view));

  const tabs = tabsFor(doc, view);
  if (!tabs.length) {
    root.appendChild(el(doc, 'div', 'tnb-message', 'No IR or code sections to show.'));
    return root;
  }
  const bar = el(doc, 'div', 'tnb-tabbar');
  bar.setAttribute('role', 'tablist');
  const panels = el(doc, 'div', 'tnb-panels');
  const buttons: HTMLButtonElement[] = [];
  const built = new Map<string, HTMLElement>();
  const select = (index: number) => {
    tabs.forEach((tab, k) => {
      const active = k === index;
      buttons[k].setAttribute('aria-selected', String(active));
      buttons[k].classList.toggle('tnb-tab-active', active);
      buttons[k].tabIndex = active ? 0 : -1;
      let panel = built.get(tab.id);
      if (active && !panel) {
        panel = el(doc, 'div', 'tnb-panel');
        panel.setAttribute('role', 'tabpanel');
        panel.dataset.tab = tab.id;
        panel.appendChild(tab.render());
        panels.appendChild(panel);
        built.set(tab.id, panel);
        links.refresh();
      }
      if (panel) {
        panel.hidden = !active;
      }
    });
    revealMapped(root); // a tab opens at the lines highlighted for the hovered or pinned source line
  };
  tabs.forEach((tab, index) => {
    const button = el(doc, 'button', 'tnb-tab', tab.title);
    button.type = 'button';
    button.dataset.sections = tab.sections.join(' ');
    button.setAttribute('role', 'tab');
    button.dataset.tab = tab.id;
    button.addEventListener('click', () => select(index));
    button.addEventListener('keydown', event => {
      const step = event.key === 'ArrowRight' ? 1 : event.key === 'ArrowLeft' ? -1 : 0;
      if (step) {
        const next = (index + step + tabs.length) % tabs.length;
        select(next);
        buttons[next].focus();
      }
    });
    buttons.push(button);
    bar.appendChild(button);
  });
  root.appendChild(bar);
  const links = linkLines(doc, root, view, buttons);
  root.appendChild(panels);
  select(0);
  return root;
}

function sameLines(x: number[] | null, y: number[] | null): boolean {
  return x === y || (x !== null && y !== null && x.length === y.length && x.every((n, k) => n === y[k]));
}

/** Scroll each visible code block so that its first highlighted line shows (the block only, not the page). */
function revealMapped(root: HTMLElement): void {
  root.querySelectorAll<HTMLElement>('.tnb-panel:not([hidden]) .tnb-code').forEach(code => {
    const first = code.querySelector<HTMLElement>('.tnb-line.tnb-mapped');
    if (!first) {
      return;
    }
    const top = first.offsetTop;
    if (top < code.scrollTop || top + first.offsetHeight > code.scrollTop + code.clientHeight) {
      code.scrollTop = Math.max(0, top - code.clientHeight / 3);
    }
  });
}

/**
 * The line mapping of one view: hovering (or clicking, to pin) a line highlights every line that came from the
 * same source line, in all sections, with counts on the tab buttons and the source line in a status line; the
 * notebook plugin hears it (SOURCE_HOVER_EVENT) and highlights the cell line, and drives it from the cell's
 * editor (SOURCE_HIGHLIGHT_EVENT). Returns `refresh`, to call when a panel was built.
 */
function linkLines(
  doc: Doc,
  root: HTMLElement,
  view: IKernelView,
  buttons: HTMLButtonElement[]
): { refresh: () => void } {
  const origins = new Map(view.sections.map(s => [s.id, originsOf(s)]));
  const mapped = view.sections.some(s => s.lineMap.size > 0);
  const status = el(doc, 'div', 'tnb-source-status');
  if (mapped) {
    root.classList.add('tnb-linked');
    root.appendChild(status);
  }
  let hovered: number[] | null = null;
  let pinned: number[] | null = null;

  const refresh = () => {
    const lines = hovered ?? pinned;
    const perSection = new Map(view.sections.map(s => [s.id, lines ? mappedLines(s, lines) : new Set<number>()]));
    root.querySelectorAll<HTMLElement>('.tnb-line[data-section]').forEach(node => {
      const on = perSection.get(node.dataset.section!)?.has(Number(node.dataset.line)) ?? false;
      node.classList.toggle('tnb-mapped', on);
    });
    root.classList.toggle('tnb-pinned', pinned !== null && hovered === null);
    for (const button of buttons) {
      const count = (button.dataset.sections ?? '')
        .split(' ')
        .reduce((sum, id) => sum + (perSection.get(id)?.size ?? 0), 0);
      let badge = button.querySelector<HTMLElement>('.tnb-tab-count');
      if (count > 0 && !badge) {
        badge = el(doc, 'span', 'tnb-tab-count');
        button.appendChild(badge);
      }
      if (badge) {
        badge.textContent = count > 0 ? String(count) : '';
        badge.hidden = count === 0;
      }
    }
    if (!mapped) {
      return;
    }
    if (lines && view.source) {
      const { firstLine, lines: text } = view.source;
      status.textContent = lines
        .map(n => `source line ${n}: ${(text[n - firstLine] ?? '').trim()}`)
        .join('  ·  ');
    } else {
      status.textContent = 'Hover over a line (or click to pin it) to see where it came from and what it became.';
    }
  };

  const tell = () => {
    const detail: ISourceHoverDetail = { lines: hovered ?? pinned, source: view.source, pin: pinned !== null };
    root.dispatchEvent(new CustomEvent(SOURCE_HOVER_EVENT, { bubbles: true, detail }));
  };
  const sourcesAt = (target: EventTarget | null): number[] | null => {
    const line = target instanceof Element ? target.closest<HTMLElement>('.tnb-line[data-section]') : null;
    if (!line || !root.contains(line)) {
      return null;
    }
    const sources = origins.get(line.dataset.section!)?.get(Number(line.dataset.line));
    return sources && sources.length ? sources : null;
  };

  if (mapped) {
    root.addEventListener('mouseover', event => {
      const sources = sourcesAt(event.target);
      if (!sameLines(sources, hovered)) {
        hovered = sources;
        refresh();
        tell();
      }
    });
    root.addEventListener('mouseleave', () => {
      if (hovered !== null) {
        hovered = null;
        refresh();
        tell();
      }
    });
    root.addEventListener('click', event => {
      const sources = sourcesAt(event.target);
      if (sources) {
        pinned = sameLines(sources, pinned) ? null : sources;
        hovered = null;
        refresh();
        revealMapped(root);
        tell();
      }
    });
  }
  root.addEventListener(SOURCE_HIGHLIGHT_EVENT, event => {
    const detail = (event as CustomEvent<ISourceHighlightDetail>).detail;
    if (!mapped || !detail) {
      return;
    }
    if (detail.lines === null && !detail.pin) {
      // The pointer left the cell: clear a hover, whichever cell it came from.
      if (hovered !== null) {
        hovered = null;
        refresh();
      }
      return;
    }
    if (!sourceMatches(view.source, detail.cellLines ?? [])) {
      return;
    }
    if (detail.pin) {
      pinned = detail.lines && !sameLines(detail.lines, pinned) ? detail.lines : null;
      hovered = null;
      refresh();
      revealMapped(root);
    } else if (!sameLines(detail.lines, hovered)) {
      hovered = detail.lines;
      refresh();
    }
  });
  refresh();
  return { refresh };
}
