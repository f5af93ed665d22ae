/**
 * The static HTML of tile_nb's kernel views survives JupyterLab's sanitizer unchanged.
 *
 * A notebook opened as stored is untrusted: JupyterLab (and GitHub, nbviewer, VS Code, each with a similar allow
 * list) sanitizes its HTML outputs, dropping tags, attributes and CSS declarations it does not allow. The views'
 * meaning must not ride on anything dropped, so this runs every stored kernel view of the tutorials (which nbval
 * keeps equal to what tile_nb renders today) through JupyterLab's own `Sanitizer`
 * and requires every element, attribute and style declaration to come out as it went in.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

import { Sanitizer } from '@jupyterlab/apputils/lib/sanitizer';

const KERNEL_MIME = 'application/vnd.tile-nb.kernel+json';
const repo = path.resolve(__dirname, '..', '..');

function storedViews(): Array<[string, string]> {
  const files = readdirSync(path.join(repo, 'notebooks'))
    .filter(name => name.endsWith('.ipynb'))
    .map(name => path.join(repo, 'notebooks', name));
  const views: Array<[string, string]> = [];
  for (const file of files) {
    const notebook = JSON.parse(readFileSync(file, 'utf8'));
    notebook.cells.forEach((cell: any, index: number) => {
      for (const output of cell.outputs ?? []) {
        const html = output.data?.['text/html'];
        if (html !== undefined && output.data[KERNEL_MIME] !== undefined) {
          views.push([`${path.basename(file)} cell ${index}`, Array.isArray(html) ? html.join('') : html]);
        }
      }
    });
  }
  return views;
}

function declarations(style: string | null): string[] {
  return (style ?? '')
    .split(';')
    .map(d => d.replace(/\s+/g, ''))
    .filter(d => d.length > 0)
    .sort();
}

/** What the sanitizer changed: the first differing element, attribute or style declaration, or null. */
export function sanitizerLoss(html: string, sanitizer = new Sanitizer()): string | null {
  const before = document.createElement('div');
  const after = document.createElement('div');
  before.innerHTML = html;
  after.innerHTML = sanitizer.sanitize(html);
  const a = Array.from(before.querySelectorAll('*'));
  const b = Array.from(after.querySelectorAll('*'));
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (!y || x.tagName !== y.tagName) {
      return `<${x.tagName.toLowerCase()}> #${i} removed`;
    }
    for (const name of x.getAttributeNames()) {
      if (name === 'style') {
        const kept = new Set(declarations(y.getAttribute('style')));
        const lost = declarations(x.getAttribute('style')).filter(d => !kept.has(d));
        if (lost.length) {
          return `<${x.tagName.toLowerCase()}> #${i} lost style ${lost.join('; ')}`;
        }
      } else if (y.getAttribute(name) !== x.getAttribute(name)) {
        return `<${x.tagName.toLowerCase()}> #${i} lost attribute ${name}`;
      }
    }
  }
  return b.length === a.length ? null : `${b.length - a.length} elements added`;
}

describe("JupyterLab's sanitizer keeps the kernel views' HTML whole", () => {
  const views = storedViews();

  it('finds the stored kernel views', () => {
    expect(views.length).toBeGreaterThanOrEqual(5);
  });

  it.each(views)('%s', (_name, html) => {
    expect(html).toContain('Phase 1: template');
    expect(sanitizerLoss(html)).toBeNull();
  });

  it('notices what the sanitizer drops (the check can fail)', () => {
    expect(sanitizerLoss('<table><col style="width:4ch"><tr><td>x</td></tr></table>')).toMatch(/lost style width:4ch/);
    expect(sanitizerLoss('<div style="color:red;position:fixed">x</div>')).toMatch(/lost style position:fixed/);
    expect(sanitizerLoss('<div><script>alert(1)</script></div>')).toMatch(/removed/);
    expect(sanitizerLoss('<div id="a">x</div>')).toMatch(/lost attribute id/);
  });
});
