import {
  formatBytes,
  formatError,
  formatMs,
  renderKernelView
} from '../src/view';
import sample from '../ui-tests/fixtures/gemm_payload.json';

const texts = (root: Element, selector: string) =>
  Array.from(root.querySelectorAll(selector)).map(node => node.textContent);

const changedNumbers = (root: Element, side: string) =>
  Array.from(root.querySelectorAll(`.tnb-line.tnb-changed[data-section="${side}"]`)).map(row =>
    Number((row as HTMLElement).dataset.line)
  );

// The sample is what tile_nb really produces (ui-tests/make_fixture.py): the quickstart GEMM specialized to
// M=256 N=256 K=128 and compiled for sm_90a. Its registers and timings depend on the machine that made it, so the
// exact formatting of those is checked on copies with fixed values.
describe('renderKernelView with the sample GEMM payload', () => {
  const root = renderKernelView(sample);

  it('shows the summary', () => {
    expect(root.querySelector('.tnb-warnings')).toBeNull();
    expect(root.querySelector('.tnb-name')!.textContent).toBe('gemm');
    expect(root.querySelector('.tnb-backend')!.textContent).toBe('cuda');
    expect(texts(root, '.tnb-const')).toEqual(['M=256', 'N=256', 'K=128']);
    expect(texts(root, '.tnb-param')[0]).toBe('A: T.Tensor[[M, K], T.float16]');
    expect(root.querySelector('.tnb-param-compile_time')).not.toBeNull();
    expect(root.querySelector('.tnb-facts')!.textContent).toMatch(
      /^\d+ registers\/thread · \d+ KiB shared · spills \d+ st \/ \d+ ld$/
    );
    expect(texts(root, '.tnb-timing')).toHaveLength(Object.keys(sample.timings_ms).length);
    expect(root.dataset.version).toBe('2');
  });

  it('formats resources and stage timings', () => {
    const fixed = renderKernelView({
      ...sample,
      resources: { registers: 168, shared_bytes: 24576, spill_stores: 0, spill_loads: 0 },
      timings_ms: { ...sample.timings_ms, nvcc: 911.0 }
    });
    expect(fixed.querySelector('.tnb-facts')!.textContent).toBe(
      '168 registers/thread · 24 KiB shared · spills 0 st / 0 ld'
    );
    expect(texts(fixed, '.tnb-timing')).toContain('nvcc 911 ms');
  });

  it("shows the view's notes (a T.dynamic dim given a value), and none when the payload has none", () => {
    const note = 'M: T.dynamic, so phase 2 keeps it symbolic (one kernel serves every value)';
    const noted = renderKernelView({ ...sample, notes: [note, 7] });
    expect(noted.querySelector('.tnb-warnings')).toBeNull();
    expect(texts(noted, '.tnb-view-note')).toEqual([note]);
    expect(root.querySelector('.tnb-notes')).toBeNull();
  });

  it('has the side-by-side tab first, then the other sections in order', () => {
    expect(texts(root, '.tnb-tab')).toEqual(['Template ↔ Specialized', 'Lowering plan', 'Lowered IR', 'CUDA source', 'PTX']);
    const first = root.querySelector('.tnb-tab')!;
    expect(first.getAttribute('aria-selected')).toBe('true');
    // Only the selected tab's panel is built.
    expect(root.querySelectorAll('.tnb-panel')).toHaveLength(1);
  });

  it('shows template and specialized side by side with the changed lines marked', () => {
    const template = root.querySelector('.tnb-pane-template')!;
    const specialized = root.querySelector('.tnb-pane-specialized')!;
    expect(template.querySelector('.tnb-pane-title')!.textContent).toBe('Phase 1: template');
    expect(specialized.querySelector('.tnb-pane-title')!.textContent).toBe('Phase 2: specialized');
    expect(template.querySelector('.tnb-note')).toBeNull();
    // The specialized side marks the lines the payload lists.
    expect(changedNumbers(root, 'specialized')).toEqual(
      sample.sections.find(s => s.id === 'specialized')!.changed_lines
    );
    expect(changedNumbers(root, 'specialized')).toEqual([2, 3, 4, 10]);
    // The template's changed lines include the `M, K = T.int32()` and `N = T.int32()` lines specialization dropped.
    expect(changedNumbers(root, 'template')).toEqual([2, 3, 4, 5, 6, 12]);
    const rowText = (side: string, line: number, selector: string) =>
      texts(root.querySelector(`.tnb-line[data-section="${side}"][data-line="${line}"]`)!, selector);
    expect(rowText('specialized', 2, '.tnb-word-changed')).toEqual(['256', '128', '128', '256', '256', '256']);
    expect(rowText('template', 2, '.tnb-word-changed')).toEqual(['"M"', '"K"', 'K', '"N"', 'M', 'N']);
    expect(rowText('specialized', 3, '.tnb-word-changed')).toEqual(['2']);
    expect(rowText('specialized', 10, '.tnb-word-changed')).toEqual(['4']);
    // Highlighted pieces are split by token color; together they are the replaced expression.
    expect(rowText('template', 5, '.tnb-word-changed').join('')).toBe('(M + 128 - 1) // 128');
    // The dropped lines have no partner, so the whole line is marked but no words.
    expect(rowText('template', 3, '.tnb-word-changed')).toEqual([]);
    expect(root.querySelector('.tnb-ir-summary')!.textContent).toBe('4 lines changed by specialization');
  });

  it('keeps the two sides row-aligned: paired lines share a row, dropped lines face a filler', () => {
    const grid = root.querySelector('.tnb-aligned')!;
    const cells = Array.from(grid.children).filter(n => n.classList.contains('tnb-line')) as HTMLElement[];
    expect(cells.length % 2).toBe(0);
    const rows: Array<[HTMLElement, HTMLElement]> = [];
    for (let k = 0; k < cells.length; k += 2) {
      rows.push([cells[k], cells[k + 1]]);
    }
    // Every row: a template cell (line or filler) on the left, a specialized one on the right.
    expect(rows.every(([l, r]) => l.classList.contains('tnb-side-template'))).toBe(true);
    expect(rows.every(([l, r]) => r.classList.contains('tnb-side-specialized'))).toBe(true);
    const text = (n: HTMLElement) => n.querySelector('.tnb-text')?.textContent ?? null;
    const template = sample.sections.find(s => s.id === 'template')!.text.split('\n');
    const specialized = sample.sections.find(s => s.id === 'specialized')!.text.split('\n');
    // All lines of both sides, in order, once each.
    expect(rows.filter(([l]) => !l.classList.contains('tnb-filler')).map(([l]) => text(l))).toEqual(template);
    expect(rows.filter(([, r]) => !r.classList.contains('tnb-filler')).map(([, r]) => text(r))).toEqual(specialized);
    // A line that is the same on both sides is on one row, even below the two dropped `T.int32()` lines.
    const same = rows.filter(([l, r]) => text(l) !== null && text(l) === text(r));
    expect(same.length).toBeGreaterThan(5);
    const last = rows[rows.length - 1];
    expect(text(last[0])).toBe(text(last[1]));
    expect(Number(last[0].dataset.line) - Number(last[1].dataset.line)).toBe(template.length - specialized.length);
    // The dropped declaration lines face fillers.
    expect(rows.filter(([, r]) => r.classList.contains('tnb-filler')).map(([l]) => text(l)!.trim())).toEqual([
      'M, K = T.int32(), T.int32()',
      'N = T.int32()'
    ]);
  });

  it("shows a section's note in its pane", () => {
    const noted = renderKernelView({
      ...sample,
      sections: sample.sections.map(s => (s.id === 'template' ? { ...s, note: 'M, N, K symbolic' } : s))
    });
    expect(noted.querySelector('.tnb-pane-template .tnb-note')!.textContent).toBe('M, N, K symbolic');
  });

  it('keeps the code text exact (line numbers are separate)', () => {
    const lines = Array.from(root.querySelectorAll('.tnb-line[data-section="specialized"] .tnb-text')).map(n =>
      n.textContent!.replace('\u200b', '')
    );
    const section = sample.sections.find(s => s.id === 'specialized')!;
    expect(lines.join('\n')).toBe(section.text);
  });

  it('switches tabs and builds panels lazily', () => {
    const view = renderKernelView(sample);
    const cuda = view.querySelector<HTMLButtonElement>('.tnb-tab[data-tab="cuda"]')!;
    cuda.click();
    expect(cuda.getAttribute('aria-selected')).toBe('true');
    const panels = Array.from(view.querySelectorAll<HTMLElement>('.tnb-panel'));
    expect(panels.map(p => [p.dataset.tab, p.hidden])).toEqual([
      ['ir', true],
      ['cuda', false]
    ]);
    expect(texts(view.querySelector('.tnb-panel[data-tab="cuda"]')!, '.tnb-tok-keyword')).toContain('extern');
  });

  it('shows the note of a section without text', () => {
    // tile_nb leaves SASS out without a disassembler (as for the sample); an empty section with a note shows it.
    const note = 'cuobjdump not found; SASS not available';
    const sass = { id: 'sass', title: 'SASS', language: 'text', text: '', note };
    const view = renderKernelView({ ...sample, sections: [...sample.sections, sass] });
    view.querySelector<HTMLButtonElement>('.tnb-tab[data-tab="sass"]')!.click();
    expect(view.querySelector('.tnb-panel[data-tab="sass"] .tnb-note')!.textContent).toMatch(/not available/);
  });

  it('moves between tabs with the arrow keys', () => {
    const view = renderKernelView(sample);
    const first = view.querySelector<HTMLButtonElement>('.tnb-tab')!;
    first.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowLeft' }));
    // From the first tab, ArrowLeft wraps around to the last one (PTX in the sample).
    const last = Array.from(view.querySelectorAll('.tnb-tab')).pop()!;
    expect(last.getAttribute('data-tab')).toBe('ptx');
    expect(last.getAttribute('aria-selected')).toBe('true');
  });
});

describe('renderKernelView with unexpected payloads', () => {
  it.each([undefined, null, 3, 'nope', []])('shows a short message for %p', raw => {
    const root = renderKernelView(raw);
    expect(root.classList.contains('tnb-invalid')).toBe(true);
    expect(root.querySelector('.tnb-warning')!.textContent).toMatch(/payload/);
  });

  it('renders a newer payload with a notice and unknown sections as tabs', () => {
    const newer = {
      ...sample,
      version: 3,
      sections: [...sample.sections, { id: 'mlir', title: 'MLIR', language: 'mlir', text: 'module {}' }],
      resources: { registers: 40, occupancy: 0.5 }
    };
    const root = renderKernelView(newer);
    expect(root.querySelector('.tnb-warning')!.textContent).toMatch(/newer/);
    expect(texts(root, '.tnb-tab')).toContain('MLIR');
    expect(root.querySelector('.tnb-facts')!.textContent).toBe('40 registers/thread');
  });

  it('shows the only IR side when the other is missing', () => {
    const root = renderKernelView({
      version: 1,
      name: 'k',
      sections: [{ id: 'template', title: 'Template', language: 'python', text: 'x = M' }]
    });
    expect(root.querySelector('.tnb-message')!.textContent).toMatch(/No specialized/);
    expect(root.querySelectorAll('.tnb-pane')).toHaveLength(1);
    expect(root.querySelector('.tnb-backend')!.textContent).toBe('not compiled');
  });

  it('says so when there are no sections at all', () => {
    const root = renderKernelView({ version: 1, name: 'k', sections: [] });
    expect(root.querySelector('.tnb-message')!.textContent).toBe('No IR or code sections to show.');
    expect(root.querySelector('.tnb-tabbar')).toBeNull();
  });

  it('writes a bare default without a colon', () => {
    const root = renderKernelView({
      version: 1,
      name: 'k',
      params: [
        { name: 'block_M', kind: 'compile_time', annotation: '= 128' },
        { name: 'M', kind: 'const', annotation: 'T.const' }
      ],
      sections: []
    });
    expect(texts(root, '.tnb-param')).toEqual(['block_M = 128', 'M: T.const']);
  });

  it('shows the run result', () => {
    const root = renderKernelView({ ...sample, run: { device: 'cpu-interpreter', max_abs_err: 0.0000019 } });
    expect(root.querySelector('.tnb-facts')!.textContent).toMatch(/ran on cpu-interpreter, max \|err\| 1.9e-6$/);
  });

  it('never interprets text as HTML', () => {
    const root = renderKernelView({
      version: 1,
      name: '<img src=x onerror=alert(1)>',
      sections: [{ id: 'cuda', title: '<b>t</b>', language: 'cuda', text: '<script>alert(1)</script>' }]
    });
    expect(root.querySelector('img')).toBeNull();
    expect(root.querySelector('script')).toBeNull();
    expect(root.querySelector('b')).toBeNull();
    expect(root.querySelector('.tnb-name')!.textContent).toBe('<img src=x onerror=alert(1)>');
  });
});

describe('formatting helpers', () => {
  it('formats bytes, times and errors', () => {
    expect(formatBytes(100)).toBe('100 B');
    expect(formatBytes(49152)).toBe('48 KiB');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(3 * 1024 * 1024)).toBe('3 MiB');
    expect(formatMs(0.012345)).toBe('0.0123 ms');
    expect(formatMs(4.56)).toBe('4.56 ms');
    expect(formatMs(1234.5)).toBe('1235 ms');
    expect(formatError(0)).toBe('0');
    expect(formatError(0.00000191)).toBe('1.9e-6');
  });
});
