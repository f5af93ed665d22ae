import { alignedRows, alignLines } from '../src/diff';
import {
  ISourceHoverDetail,
  mappedLines,
  originsOf,
  SOURCE_HIGHLIGHT_EVENT,
  SOURCE_HOVER_EVENT,
  sourceMatches
} from '../src/linemap';
import { findSection, parsePayload } from '../src/payload';
import { renderKernelView } from '../src/view';
import sample from '../ui-tests/fixtures/gemm_payload.json';

// The sample is tile_nb's real view of the quickstart GEMM (ui-tests/make_fixture.py): its source starts at line 2
// of the cell (line 1 is the %%tilekernel line), and every IR and code section but the plan and PTX carries a
// line map (the lowered TIRx and CUDA ones from the compiled kernel's source regions).
const source = sample.source as { first_line: number; lines: string[] };
const lineOf = (needle: string) => source.first_line + source.lines.findIndex(l => l.includes(needle));
const COPY_A = lineOf('T.copy(A[');
const CELL = ['%%tilekernel --shapes M=256 N=256 K=128', ...source.lines];
const sectionMap = (id: string) =>
  (sample.sections.find(s => s.id === id)!.line_map as Record<string, number[]>)[String(COPY_A)];
const sectionLine = (id: string, n: number) => sample.sections.find(s => s.id === id)!.text.split('\n')[n - 1];

const mapped = (root: Element, side: string) =>
  Array.from(root.querySelectorAll<HTMLElement>(`.tnb-line.tnb-mapped[data-section="${side}"]`)).map(n =>
    Number(n.dataset.line)
  );
const lineEl = (root: Element, side: string, line: number) =>
  root.querySelector<HTMLElement>(`.tnb-line[data-section="${side}"][data-line="${line}"]`)!;

describe('line maps in the payload', () => {
  it('reads the source and the per-section maps', () => {
    const { view, warnings } = parsePayload(sample);
    expect(warnings).toEqual([]);
    expect(view!.source!.firstLine).toBe(2);
    expect(view!.source!.lines[COPY_A - 2].trim()).toBe('T.copy(A[bx * block_M, k * block_K], A_shared)');
    const template = findSection(view!, 'template')!;
    const text = template.text.split('\n');
    expect(Array.from(mappedLines(template, [COPY_A])).map(n => text[n - 1].trim().split('(')[0])).toEqual([
      'T.tile.copy'
    ]);
    // T.const('M, N, K') became the two declaration lines of phase 1 and nothing in phase 2.
    const consts = lineOf("T.const('M, N, K')");
    expect(Array.from(mappedLines(template, [consts]))).toEqual([3, 4]);
    expect(Array.from(mappedLines(findSection(view!, 'specialized')!, [consts]))).toEqual([]);
    expect(originsOf(template).get(2)).toEqual([3, 5, 6, 7]); // the def line: def + three annotations
  });

  it('drops malformed entries and reads a version-1 payload without maps or warnings', () => {
    const { view } = parsePayload({
      version: 2,
      name: 'k',
      source: { first_line: 0, lines: ['x'] },
      sections: [{ id: 'cuda', text: 'a\nb', line_map: { '3': [1, 'x', -1, 2, 2], x: [1], '4': 'no' } }]
    });
    expect(view!.source).toBeNull();
    expect(Array.from(view!.sections[0].lineMap)).toEqual([[3, [1, 2]]]);
    const old = parsePayload({ version: 1, name: 'k', sections: [{ id: 'cuda', text: 'a' }] });
    expect(old.warnings).toEqual([]);
    expect(old.view!.sections[0].lineMap.size).toBe(0);
    expect(old.view!.source).toBeNull();
  });

  it('matches a cell by content at the same line numbers', () => {
    const src = { firstLine: 2, lines: ['def f():', '    x = 1  '] };
    expect(sourceMatches(src, ['%%tilekernel', 'def f():', '    x = 1'])).toBe(true);
    expect(sourceMatches(src, ['def f():', '    x = 1'])).toBe(false); // shifted by a line
    expect(sourceMatches(src, ['%%tilekernel', 'def f():', '    x = 2'])).toBe(false);
    expect(sourceMatches(src, ['%%tilekernel', 'def f():'])).toBe(false);
    expect(sourceMatches(null, ['x'])).toBe(false);
  });

  it('pairs aligned rows in order with fillers', () => {
    const a = ['a', 'M = T.int32()', 'x[M]', 'b'];
    const b = ['a', 'x[64]', 'b', 'c'];
    expect(alignedRows(alignLines(a, b))).toEqual([
      [0, 0],
      [1, -1],
      [2, 1],
      [3, 2],
      [-1, 3]
    ]);
  });
});

describe('line mapping in the view', () => {
  it('highlights what a hovered line came from and became, and tells the notebook', () => {
    const root = renderKernelView(sample);
    expect(root.classList.contains('tnb-linked')).toBe(true);
    const heard: ISourceHoverDetail[] = [];
    const host = document.createElement('div');
    host.appendChild(root);
    host.addEventListener(SOURCE_HOVER_EVENT, e => heard.push((e as CustomEvent<ISourceHoverDetail>).detail));
    const template = findSection(parsePayload(sample).view!, 'template')!;
    const copyLine = Array.from(mappedLines(template, [COPY_A]))[0];
    lineEl(root, 'template', copyLine).dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
    const copyText = (side: string) =>
      mapped(root, side).map(n => lineEl(root, side, n).querySelector('.tnb-text')!.textContent!.trim());
    expect(copyText('template')).toEqual([expect.stringMatching(/^T\.tile\.copy\(A_shared/)]);
    expect(copyText('specialized')).toEqual([expect.stringMatching(/^T\.tile\.copy\(A_shared/)]);
    expect(root.querySelector('.tnb-source-status')!.textContent).toBe(
      `source line ${COPY_A}: T.copy(A[bx * block_M, k * block_K], A_shared)`
    );
    expect(heard.at(-1)).toEqual({ lines: [COPY_A], source: { firstLine: 2, lines: source.lines }, pin: false });
    // The IR tab counts the highlighted lines of both sides.
    expect(root.querySelector('.tnb-tab[data-tab="ir"] .tnb-tab-count')!.textContent).toBe('2');
    root.dispatchEvent(new MouseEvent('mouseleave'));
    expect(mapped(root, 'template')).toEqual([]);
    expect(heard.at(-1)!.lines).toBeNull();
  });

  it('maps one source line to several IR lines (the T.Kernel line became three launches)', () => {
    const root = renderKernelView(sample);
    const kernelLine = lineOf('with T.Kernel(');
    root.dispatchEvent(
      new CustomEvent(SOURCE_HIGHLIGHT_EVENT, { detail: { lines: [kernelLine], cellLines: CELL, pin: false } })
    );
    expect(mapped(root, 'template')).toEqual([5, 6, 7]);
    expect(mapped(root, 'specialized')).toEqual([3, 4, 5]);
  });

  it('follows the cell editor only for its own cell, and pins on click', () => {
    const root = renderKernelView(sample);
    const send = (cellLines: string[], lines: number[] | null, pin: boolean) =>
      root.dispatchEvent(new CustomEvent(SOURCE_HIGHLIGHT_EVENT, { detail: { lines, cellLines, pin } }));
    send(CELL.slice(1), [COPY_A], false); // another cell (its lines are one off): ignored
    expect(mapped(root, 'template')).toEqual([]);
    send(CELL, [COPY_A], true);
    expect(mapped(root, 'template')).toHaveLength(1);
    expect(root.classList.contains('tnb-pinned')).toBe(true);
    send(CELL, null, false); // the pointer leaves the editor: the pin stays
    expect(mapped(root, 'template')).toHaveLength(1);
    send(CELL, [COPY_A], true); // clicking the same line again unpins
    expect(mapped(root, 'template')).toEqual([]);
    // A click on an IR line pins its source line too.
    const line = lineEl(root, 'specialized', 14);
    line.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(mapped(root, 'specialized')).toEqual([14]);
    root.dispatchEvent(new MouseEvent('mouseleave'));
    expect(mapped(root, 'specialized')).toEqual([14]);
  });

  it('uses the lowered and CUDA line maps (counts on the tabs, lines when opened)', () => {
    const lowered = sectionMap('lowered');
    const cuda = sectionMap('cuda');
    // The copy became cp.async calls in both texts (the prologue's and the steady state's).
    expect(lowered.some(n => sectionLine('lowered', n).includes('cp_async'))).toBe(true);
    expect(cuda.some(n => sectionLine('cuda', n).includes('cp_async'))).toBe(true);
    const root = renderKernelView(sample);
    root.dispatchEvent(
      new CustomEvent(SOURCE_HIGHLIGHT_EVENT, { detail: { lines: [COPY_A], cellLines: CELL, pin: true } })
    );
    const count = (tab: string) => root.querySelector(`.tnb-tab[data-tab="${tab}"] .tnb-tab-count`)?.textContent;
    expect(count('lowered')).toBe(String(lowered.length));
    expect(count('cuda')).toBe(String(cuda.length));
    expect(root.querySelector('.tnb-tab[data-tab="ptx"] .tnb-tab-count')).toBeNull();
    root.querySelector<HTMLButtonElement>('.tnb-tab[data-tab="lowered"]')!.click();
    expect(mapped(root, 'lowered')).toEqual(lowered);
    root.querySelector<HTMLButtonElement>('.tnb-tab[data-tab="cuda"]')!.click();
    expect(mapped(root, 'cuda')).toEqual(cuda);
    // Hovering a CUDA line maps back to its source line and from there to the IR.
    const back: number[][] = [];
    root.addEventListener(SOURCE_HOVER_EVENT, e => back.push((e as CustomEvent).detail.lines));
    lineEl(root, 'cuda', cuda[0]).dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
    expect(back.at(-1)).toEqual([COPY_A]);
  });

  it('shows no mapping (and no error) without line maps', () => {
    const plain = {
      ...sample,
      version: 1,
      source: undefined,
      sections: sample.sections.map(s => ({ ...s, line_map: undefined }))
    };
    const root = renderKernelView(plain);
    expect(root.querySelector('.tnb-warnings')).toBeNull();
    expect(root.classList.contains('tnb-linked')).toBe(false);
    expect(root.querySelector('.tnb-source-status')).toBeNull();
    lineEl(root, 'template', 14).dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
    root.dispatchEvent(
      new CustomEvent(SOURCE_HIGHLIGHT_EVENT, { detail: { lines: [COPY_A], cellLines: CELL, pin: true } })
    );
    expect(root.querySelectorAll('.tnb-mapped')).toHaveLength(0);
  });
});
