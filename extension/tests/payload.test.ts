import { findSection, parsePayload, PAYLOAD_VERSION } from '../src/payload';
import sample from '../ui-tests/fixtures/gemm_payload.json';

describe('parsePayload', () => {
  it('reads the sample payload without warnings', () => {
    const { view, warnings } = parsePayload(sample);
    expect(warnings).toEqual([]);
    expect(view).not.toBeNull();
    expect(view!.name).toBe('gemm');
    expect(view!.backend).toBe('cuda');
    expect(view!.consts).toEqual([
      ['M', 256],
      ['N', 256],
      ['K', 128]
    ]);
    expect(view!.params.map(p => p.kind)).toEqual([
      'tensor',
      'tensor',
      'tensor',
      'const',
      'const',
      'const',
      'compile_time',
      'compile_time',
      'compile_time',
      'compile_time'
    ]);
    expect(view!.sections.map(s => s.id)).toEqual(['template', 'specialized', 'plan', 'lowered', 'cuda', 'ptx']);
    expect(findSection(view!, 'specialized')!.changedLines).toEqual([2, 3, 4, 10]);
    // Registers and timings are those of the machine that made the sample: check the mapping, not the numbers.
    const r = sample.resources;
    expect(view!.resources).toEqual({
      registers: r.registers,
      sharedBytes: r.shared_bytes,
      spillStores: r.spill_stores,
      spillLoads: r.spill_loads
    });
    expect(view!.timingsMs).toEqual(Object.entries(sample.timings_ms));
    expect(view!.timingsMs[0][0]).toBe('elaborate');
    expect(view!.run).toBeNull();
  });

  it.each([null, 42, 'not json', [1, 2]])('refuses %p with one message', raw => {
    const { view, warnings } = parsePayload(raw);
    expect(view).toBeNull();
    expect(warnings).toHaveLength(1);
  });

  it('accepts the payload as a JSON string', () => {
    expect(parsePayload(JSON.stringify(sample)).view!.name).toBe('gemm');
  });

  it('fills defaults for an empty object and says what is missing', () => {
    const { view, warnings } = parsePayload({});
    expect(view!.name).toBe('(unnamed kernel)');
    expect(view!.sections).toEqual([]);
    expect(view!.resources).toBeNull();
    expect(warnings.join(' ')).toMatch(/no version/);
    expect(warnings.join(' ')).toMatch(/no "sections"/);
  });

  it('warns about a newer version but keeps what it knows', () => {
    const newer = { ...sample, version: PAYLOAD_VERSION + 1, flamegraph: { x: 1 } };
    const { view, warnings } = parsePayload(newer);
    expect(view!.sections).toHaveLength(sample.sections.length);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/newer/);
  });

  it('names unknown fields of a current-version payload', () => {
    const { warnings } = parsePayload({ ...sample, extra: 1 });
    expect(warnings).toEqual(['Fields not shown: extra.']);
  });

  it('skips malformed entries and counts them', () => {
    const { view, warnings } = parsePayload({
      version: 1,
      name: 'k',
      params: [{ name: 'A', kind: 'tensor', annotation: 'T.Tensor' }, 'junk', { kind: 'tensor' }],
      consts: { M: 4, bad: 'x' },
      sections: [
        { id: 'cuda', text: 'int x;' },
        { id: 'cuda', text: 'dup' },
        { title: 'no id' },
        { id: 'specialized', text: 'a\nb', changed_lines: [2, 2, 0, 'x', 1.5, 1] }
      ],
      resources: { registers: 'many' },
      timings_ms: { a: 1, b: 'slow' },
      run: { max_abs_err: 0.5 }
    });
    expect(view!.params).toHaveLength(1);
    expect(view!.consts).toEqual([['M', 4]]);
    expect(view!.sections.map(s => s.id)).toEqual(['cuda', 'specialized']);
    expect(view!.sections[0]).toMatchObject({ title: 'cuda', language: 'text', note: null, changedLines: null });
    expect(view!.sections[1].changedLines).toEqual([1, 2]);
    expect(view!.resources).toBeNull();
    expect(view!.timingsMs).toEqual([['a', 1]]);
    expect(view!.run).toEqual({ device: 'unknown device', maxAbsErr: 0.5 });
    expect(view!.notes).toEqual([]);
    expect(warnings).toEqual([
      '2 parameter entries could not be read.',
      'Section "cuda" appears twice; the first one is shown.',
      '1 section without an "id" or "text" could not be shown.'
    ]);
  });

  it('treats wrong container types as absent with a message', () => {
    const { view, warnings } = parsePayload({ version: 1, params: {}, consts: [], sections: 'x' });
    expect(view!.params).toEqual([]);
    expect(view!.consts).toEqual([]);
    expect(view!.sections).toEqual([]);
    expect(warnings).toHaveLength(3);
  });
});
