/**
 * The kernel view as plain DOM: payload -> HTMLElement.
 *
 * No JupyterLab imports here, so the whole view is unit-tested in jsdom
 * (tests/view.test.ts). The MIME renderer (mime.ts) only wraps the element in a
 * Lumino widget. Text always goes in through `textContent`, never `innerHTML`:
 * the payload comes from a notebook, which may be untrusted.
 */

import {
  alignLines,
  changedLineNumbers,
  changedRanges,
  ILineAlignment,
  mapLinePosition,
  splitLines
} from './diff';
import { splitByRanges, tokenizeLine } from './highlight';
import { findSection, IKernelSection, IKernelView, parsePayload } from './payload';

/** Order of the section tabs after the side-by-side IR tab; unknown ids follow in payload order. */
const SECTION_ORDER = ['lowered', 'cuda', 'ptx', 'sass'];

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

/**
 * Which scrollTop of the other pane shows the code that corresponds to `scrollTop`
 * of this pane. `partner` maps this pane's lines to the other's (`aToB`/`bToA`).
 */
export function correspondingScrollTop(
  scrollTop: number,
  lineHeight: number,
  partner: number[],
  otherLength: number
): number {
  if (lineHeight <= 0) {
    return scrollTop;
  }
  return mapLinePosition(partner, otherLength, scrollTop / lineHeight) * lineHeight;
}

interface ILineOptions {
  changed: Set<number>;
  /** Changed character ranges per 1-based line number. */
  ranges: Map<number, Array<[number, number]>>;
}

/** One code block with line numbers; lines in `options.changed` (1-based) get `tnb-changed`. */
export function renderCode(
  doc: Doc,
  text: string,
  language: string,
  options: ILineOptions = { changed: new Set(), ranges: new Map() }
): HTMLElement {
  const code = el(doc, 'div', 'tnb-code');
  code.tabIndex = 0;
  code.dataset.language = language;
  const lines = splitLines(text);
  lines.forEach((line, index) => {
    const number = index + 1;
    const row = el(doc, 'div', 'tnb-line');
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
    code.appendChild(row);
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

/**
 * Keep two code panes scrolled to corresponding lines. Returns a function that
 * turns the synchronization on or off.
 */
export function linkScrolling(
  left: HTMLElement,
  right: HTMLElement,
  alignment: ILineAlignment
): (enabled: boolean) => void {
  let enabled = true;
  // The scrollTop we set on a pane, so its own scroll event is not echoed back.
  const expected = new Map<HTMLElement, number>();
  const lineHeight = (pane: HTMLElement) => {
    const first = pane.querySelector<HTMLElement>('.tnb-line');
    return first ? first.getBoundingClientRect().height || first.offsetHeight : 0;
  };
  const follow = (source: HTMLElement, target: HTMLElement, partner: number[], otherLength: number) => {
    if (!enabled) {
      return;
    }
    const echo = expected.get(source);
    if (echo !== undefined) {
      expected.delete(source);
      if (Math.abs(source.scrollTop - echo) < 1) {
        return;
      }
    }
    const top = correspondingScrollTop(source.scrollTop, lineHeight(source), partner, otherLength);
    const maxTop = Math.max(0, target.scrollHeight - target.clientHeight);
    const clamped = Math.min(maxTop, Math.max(0, top));
    if (Math.abs(target.scrollTop - clamped) >= 1 || target.scrollLeft !== source.scrollLeft) {
      expected.set(target, clamped);
      target.scrollTop = clamped;
      target.scrollLeft = source.scrollLeft;
    }
  };
  left.addEventListener('scroll', () => follow(left, right, alignment.aToB, alignment.bToA.length));
  right.addEventListener('scroll', () => follow(right, left, alignment.bToA, alignment.aToB.length));
  return (value: boolean) => {
    enabled = value;
    if (value) {
      follow(left, right, alignment.aToB, alignment.bToA.length);
    }
  };
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
    split.appendChild(
      renderPane(doc, only, renderCode(doc, only.text, only.language, { changed, ranges: new Map() }), only.id)
    );
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
  const label = el(doc, 'label', 'tnb-sync');
  const checkbox = el(doc, 'input');
  checkbox.type = 'checkbox';
  checkbox.checked = true;
  label.appendChild(checkbox);
  label.appendChild(doc.createTextNode(' synchronized scrolling'));
  toolbar.appendChild(label);
  panel.appendChild(toolbar);

  const split = el(doc, 'div', 'tnb-split');
  const leftCode = renderCode(doc, template.text, template.language, left);
  const rightCode = renderCode(doc, specialized.text, specialized.language, right);
  split.appendChild(renderPane(doc, template, leftCode, 'template'));
  split.appendChild(renderPane(doc, specialized, rightCode, 'specialized'));
  panel.appendChild(split);
  const setSync = linkScrolling(leftCode, rightCode, alignment);
  checkbox.addEventListener('change', () => setSync(checkbox.checked));
  return panel;
}

function renderSectionPanel(doc: Doc, section: IKernelSection): HTMLElement {
  const panel = el(doc, 'div', 'tnb-section');
  const changed = new Set(section.changedLines ?? []);
  const code = renderCode(doc, section.text, section.language, { changed, ranges: new Map() });
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
  render: () => HTMLElement;
}

/** The tabs in display order: the side-by-side IR first, then the other sections. */
export function tabsFor(doc: Doc, view: IKernelView): ITab[] {
  const tabs: ITab[] = [];
  if (findSection(view, 'template') || findSection(view, 'specialized')) {
    tabs.push({ id: IR_TAB_ID, title: 'Template ↔ Specialized', render: () => renderIrPanel(doc, view) });
  }
  const rest = view.sections.filter(s => s.id !== 'template' && s.id !== 'specialized');
  const rank = (id: string) => {
    const index = SECTION_ORDER.indexOf(id);
    return index < 0 ? SECTION_ORDER.length : index;
  };
  // Array.prototype.sort is stable, so unknown ids keep their payload order.
  rest.sort((x, y) => rank(x.id) - rank(y.id));
  for (const section of rest) {
    tabs.push({ id: section.id, title: section.title, render: () => renderSectionPanel(doc, section) });
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
      }
      if (panel) {
        panel.hidden = !active;
      }
    });
  };
  tabs.forEach((tab, index) => {
    const button = el(doc, 'button', 'tnb-tab', tab.title);
    button.type = 'button';
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
  root.appendChild(panels);
  select(0);
  return root;
}
