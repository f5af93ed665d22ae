/**
 * MIME renderer for `application/vnd.tile-nb.kernel+json`: the kernel view in an output area.
 *
 * A thin Lumino wrapper around `renderKernelView` (view.ts), which does the work.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { KERNEL_MIME_TYPE } from './payload';
import { renderKernelView } from './view';

const RENDERER_CLASS = 'jp-TileNbKernelRenderer';

/** Renders one kernel view payload; re-rendering replaces the previous view. */
export class KernelViewRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass(RENDERER_CLASS);
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const view = renderKernelView(model.data[this._mimeType], this.node.ownerDocument);
    this.node.replaceChildren(view);
    return Promise.resolve();
  }

  private _mimeType: string;
}

/** The renderer factory. `safe`: the view builds DOM from text only, so untrusted notebooks show it too. */
export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [KERNEL_MIME_TYPE],
  createRenderer: options => new KernelViewRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'tile-nb-labextension:kernel-view',
  description: 'Renders tile_nb kernel views: template and specialized IR side by side.',
  rendererFactory,
  // Lower than text/html's rank, so JupyterLab prefers this view over the static HTML fallback.
  rank: 10,
  dataType: 'json'
};

export default extension;
