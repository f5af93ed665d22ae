import {
  correspondingScrollTop,
  formatBytes,
  formatError,
  formatMs,
  renderKernelView
} from '../src/view';
import sample from '../ui-tests/fixtures/gemm_payload.json';

const texts = (root: Element, selector: string) =>
  Array.from(root.querySelectorAll(selector)).map(node => node.textContent);

const changedNumbers = (pane: Element) =>
  Array.from(pane.querySelectorAll('.tnb-line.tnb-changed')).map(row => Number((row as HTMLElement).dataset.line));

describe('renderKernelView with the sample GEMM payload', () => {
  const root = renderKernelView(sample);

  it('shows the summary', () => {
    expect(root.querySelector('.tnb-warnings')).toBeNull();
    expect(root.querySelector('.tnb-name')!.textContent).toBe('gemm');
    expect(root.querySelector('.tnb-backend')!.textContent).toBe('cuda');
    expect(texts(root, '.tnb-const')).toEqual(['M=1024', 'N=1024', 'K=1024']);
    expect(texts(root, '.tnb-param')[0]).toBe('A: T.Tensor[[M, K], T.float16]');
    expect(root.querySelector('.tnb-param-compile_time')).not.toBeNull();
    expect(root.querySelector('.tnb-facts')!.textContent).toBe(
      '168 registers/thread · 24 KiB shared · spills 0 st / 0 ld'
    );
    expect(texts(root, '.tnb-timing')).toContain('nvcc 911 ms');
    expect(root.dataset.version).toBe('1');
  });

  it('has the side-by-side tab first, then the other sections in order', () => {
    expect(texts(root, '.tnb-tab')).toEqual(['Template ↔ Specialized', 'Lowered TIR', 'CUDA', 'PTX', 'SASS']);
    const first = root.querySelector('.tnb-tab')!;
    expect(first.getAttribute('aria-selected')).toBe('true');
    // Only the selected tab's panel is built.
    expect(root.querySelectorAll('.tnb-panel')).toHaveLength(1);
  });

  it('shows template and specialized side by side with the changed lines marked', () => {
    const template = root.querySelector('.tnb-pane-template')!;
    const specialized = root.querySelector('.tnb-pane-specialized')!;
    expect(template.querySelector('.tnb-pane-title')!.textContent).toBe('Template (phase 1)');
    expect(template.querySelector('.tnb-note')!.textContent).toBe('M, N, K symbolic');
    expect(changedNumbers(specialized)).toEqual([6, 7, 8, 10, 11, 17]);
    // The template's changed lines include the `M, N, K = T.int32()...` line that specialization dropped.
    expect(changedNumbers(template)).toEqual([6, 7, 8, 9, 11, 12, 18]);
    const rowText = (pane: Element, line: number, selector: string) =>
      texts(pane.querySelector(`.tnb-line[data-line="${line}"]`)!, selector);
    expect(rowText(specialized, 6, '.tnb-word-changed').join('')).toBe('1024, 1024');
    expect(rowText(template, 7, '.tnb-word-changed').join('')).toBe('M, K');
    expect(rowText(specialized, 10, '.tnb-word-changed')).toEqual(['8']);
    expect(rowText(specialized, 17, '.tnb-word-changed')).toEqual(['32']);
    // Highlighted pieces are split by token color; together they are the replaced expression.
    expect(rowText(template, 11, '.tnb-word-changed').join('')).toBe('(M + 127) // 128');
    // The dropped line has no partner, so the whole line is marked but no words.
    expect(rowText(template, 6, '.tnb-word-changed')).toEqual([]);
    expect(root.querySelector('.tnb-ir-summary')!.textContent).toBe('6 lines changed by specialization');
  });

  it('keeps the code text exact (line numbers are separate)', () => {
    const specialized = root.querySelector('.tnb-pane-specialized')!;
    const lines = Array.from(specialized.querySelectorAll('.tnb-text')).map(n => n.textContent!.replace('\u200b', ''));
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
    expect(view.querySelector('.tnb-panel[data-tab="cuda"] .tnb-tok-keyword')!.textContent).toBe('extern');
    view.querySelector<HTMLButtonElement>('.tnb-tab[data-tab="sass"]')!.click();
    expect(view.querySelector('.tnb-panel[data-tab="sass"] .tnb-note')!.textContent).toMatch(/not available/);
  });

  it('moves between tabs with the arrow keys', () => {
    const view = renderKernelView(sample);
    const first = view.querySelector<HTMLButtonElement>('.tnb-tab')!;
    first.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowLeft' }));
    expect(view.querySelector('.tnb-tab[data-tab="sass"]')!.getAttribute('aria-selected')).toBe('true');
  });

  it('synchronizes scrolling through the line alignment', () => {
    const view = renderKernelView(sample);
    const [left, right] = Array.from(view.querySelectorAll<HTMLElement>('.tnb-code'));
    // jsdom has no layout: give the panes a line height and a scroll range.
    for (const pane of [left, right]) {
      Object.defineProperty(pane, 'scrollHeight', { value: 1000 });
      Object.defineProperty(pane, 'clientHeight', { value: 100 });
      pane.querySelectorAll<HTMLElement>('.tnb-line').forEach(row => {
        Object.defineProperty(row, 'offsetHeight', { value: 20 });
      });
    }
    // Template line 12 (index 11) pairs with specialized line 11 (index 10): one line removed above.
    left.scrollTop = 11 * 20;
    left.dispatchEvent(new Event('scroll'));
    expect(right.scrollTop).toBe(10 * 20);
    // The echo of our own change does not scroll the template back.
    right.dispatchEvent(new Event('scroll'));
    expect(left.scrollTop).toBe(11 * 20);
    // Turning synchronization off stops following.
    const checkbox = view.querySelector<HTMLInputElement>('.tnb-sync input')!;
    checkbox.checked = false;
    checkbox.dispatchEvent(new Event('change'));
    left.scrollTop = 0;
    left.dispatchEvent(new Event('scroll'));
    expect(right.scrollTop).toBe(10 * 20);
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
      version: 2,
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

  it('maps a scroll position through the alignment', () => {
    expect(correspondingScrollTop(40, 20, [0, 1, 2], 3)).toBe(40);
    expect(correspondingScrollTop(40, 0, [0, 1, 2], 3)).toBe(40);
    expect(correspondingScrollTop(50, 20, [0, -1, 1], 2)).toBe(30);
  });
});
