import extension, { rendererFactory } from '../src/mime';
import { KERNEL_MIME_TYPE } from '../src/payload';
import sample from '../ui-tests/fixtures/gemm_payload.json';

// The smallest IMimeModel the renderer reads: just `data`.
const model = (data: unknown) => ({ data: { [KERNEL_MIME_TYPE]: data } }) as any;

describe('MIME extension', () => {
  it('registers a safe renderer for the kernel MIME type, ranked above text/html', () => {
    expect(rendererFactory.mimeTypes).toEqual([KERNEL_MIME_TYPE]);
    expect(rendererFactory.safe).toBe(true);
    expect(extension.rank).toBeLessThan(50);
    expect(extension.dataType).toBe('json');
  });

  it('renders and re-renders into the widget node', async () => {
    const renderer = rendererFactory.createRenderer({ mimeType: KERNEL_MIME_TYPE } as any);
    await renderer.renderModel(model(sample));
    expect(renderer.node.classList).toContain('jp-TileNbKernelRenderer');
    expect(renderer.node.querySelectorAll('.tnb-kernel-view')).toHaveLength(1);
    await renderer.renderModel(model({ version: 1, name: 'other', sections: [] }));
    expect(renderer.node.querySelectorAll('.tnb-kernel-view')).toHaveLength(1);
    expect(renderer.node.querySelector('.tnb-name')!.textContent).toBe('other');
  });

  it('shows a message instead of failing on a broken payload', async () => {
    const renderer = rendererFactory.createRenderer({ mimeType: KERNEL_MIME_TYPE } as any);
    await expect(renderer.renderModel(model(undefined))).resolves.toBeUndefined();
    expect(renderer.node.querySelector('.tnb-warning')!.textContent).toMatch(/not a JSON object/);
  });
});
