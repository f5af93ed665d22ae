// Browser test of tile_nb in a real JupyterLab (started by run.py): the quickstart as a user meets it.
//
// 1. static_view.ipynb (the quickstart's outputs without the extension's MIME type): JupyterLab shows tile_nb's
//    static HTML, sanitized as for any untrusted notebook; both IR columns are wide and rows are aligned.
// 2. 01_quickstart.ipynb as stored (untrusted): the extension renders the stored kernel views without warnings.
// 3. Clear the outputs, run all cells: the views come back from the live kernel; the template and specialized
//    sides are row-aligned; hovering a line of the kernel cell highlights what it became in both phases (in every
//    view of that kernel), hovering an IR line highlights its line in the cell; the %%tilekernel cell is marked.
// 4. The `--cuda --lowered` view: a pinned cell line is highlighted in the lowered TIRx and CUDA tabs, and a CUDA
//    line names its source line.
// Screenshots of the line mapping go to $TNB_OUTPUT/line-mapping.png and line-mapping-cuda.png (run.py copies
// them to docs/).
// Uses Debian's Chromium through playwright-core; never downloads a browser. Exits non-zero on the first failure.
import { chromium } from 'playwright-core';
import path from 'node:path';

const base = process.env.TNB_LAB_URL;
const token = process.env.TNB_LAB_TOKEN;
const output = process.env.TNB_OUTPUT ?? 'ui-tests/output';
const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const expected = JSON.parse(process.env.TNB_NOTEBOOK ?? '{}');
if (!base || !token || !expected.name) {
  console.error('TNB_LAB_URL, TNB_LAB_TOKEN and TNB_NOTEBOOK must be set (run ui-tests/run.py)');
  process.exit(2);
}

const started = Date.now();
const checks = [];
function check(ok, message) {
  checks.push(message);
  if (!ok) {
    throw new Error(`check failed: ${message}`);
  }
  console.log(`ok - ${message} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
}

const browser = await chromium.launch({
  executablePath,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run'
  ]
});

async function openNotebook(page, name) {
  await page.goto(`${base}/lab/tree/${encodeURIComponent(name)}?reset&token=${token}`);
  const panel = page.locator('.jp-NotebookPanel:visible').first();
  await panel.locator('.jp-Cell').first().waitFor({ state: 'visible', timeout: 90_000 });
  await page.addStyleTag({ content: '.Toastify { display: none !important; }' });
  const leftTab = page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current');
  if (await leftTab.count()) {
    await leftTab.first().click(); // collapse the file browser
  }
  return panel;
}

async function menu(page, top, item) {
  await page.locator('.lm-MenuBar-itemLabel', { hasText: new RegExp(`^${top}$`) }).click();
  await page.locator('.lm-Menu-itemLabel', { hasText: new RegExp(`^${item}$`) }).first().click();
}

/** Left and right cells of each row of a view's aligned grid, with their boxes and texts. */
async function gridRows(view) {
  return view.locator('.tnb-aligned').evaluate(grid => {
    const cells = Array.from(grid.children).filter(n => n.classList.contains('tnb-line'));
    const rows = [];
    for (let k = 0; k + 1 < cells.length; k += 2) {
      const [l, r] = [cells[k], cells[k + 1]].map(n => {
        const box = n.getBoundingClientRect();
        return { top: box.top, height: box.height, width: box.width, text: n.querySelector('.tnb-text')?.textContent ?? null };
      });
      rows.push([l, r]);
    }
    return rows;
  });
}

let page;
try {
  const context = await browser.newContext({ viewport: { width: 1440, height: 1000 }, deviceScaleFactor: 1 });
  page = await context.newPage();
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  page.on('console', message => {
    if (message.type() === 'error' && /tile|tnb/i.test(message.text())) {
      errors.push(message.text());
    }
  });

  // 1. The static HTML, sanitized (untrusted): wide columns, one row per aligned line pair.
  let panel = await openNotebook(page, 'static_view.ipynb');
  const table = panel.locator('.jp-RenderedHTMLCommon table', { hasText: 'Phase 1: template' }).first();
  await table.waitFor({ state: 'visible', timeout: 60_000 });
  check((await panel.locator('.tnb-kernel-view').count()) === 0, 'static copy: no extension view (static HTML shown)');
  const layout = await table.evaluate(t => {
    const width = t.getBoundingClientRect().width;
    const rows = Array.from(t.querySelectorAll('tbody tr'));
    const cells = rows[rows.length - 1].querySelectorAll('td');
    const clipped = Array.from(t.querySelectorAll('tbody td')).filter(td => td.scrollWidth > td.clientWidth + 1).length;
    return {
      width,
      left: cells[1].getBoundingClientRect().width,
      right: cells[4].getBoundingClientRect().width,
      lastLeft: cells[1].textContent.trim(),
      lastRight: cells[4].textContent.trim(),
      clipped
    };
  });
  check(
    layout.left > 0.35 * layout.width && layout.right > 0.35 * layout.width,
    `static view: each IR column is over a third of the table (${Math.round(layout.left)} and ${Math.round(layout.right)} of ${Math.round(layout.width)} px)`
  );
  check(layout.lastLeft === layout.lastRight && layout.lastLeft.startsWith('T.tile.copy(C['), 'static view: the last lines share a row');
  check(layout.clipped === 0, `static view: no cell clips its text (long lines wrap): ${layout.clipped}`);
  await table.screenshot({ path: path.join(output, 'static-view.png') });

  // 2. The quickstart as stored (untrusted): the extension renders the stored views.
  panel = await openNotebook(page, expected.name);
  await panel.locator('.tnb-kernel-view').first().waitFor({ state: 'visible', timeout: 60_000 });
  const storedWarnings = await panel.locator('.tnb-kernel-view .tnb-warnings').count();
  check(storedWarnings === 0, 'stored kernel views render without payload warnings');

  // 3. Run it: clear the outputs, run all cells, wait for the kernel to finish.
  await menu(page, 'Edit', 'Clear Outputs of All Cells');
  await page.waitForFunction(() => document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .tnb-kernel-view').length === 0);
  const runStart = Date.now();
  await menu(page, 'Run', 'Run All Cells');
  const scroller = panel.locator('.jp-WindowedPanel-outer');
  await page.waitForFunction(
    () => {
      const prompts = Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-InputPrompt'));
      const busy = prompts.some(p => p.textContent.includes('*'));
      const done = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
      return !busy && done !== null;
    },
    null,
    { timeout: 240_000, polling: 500 }
  );
  // Windowed notebooks attach cells lazily: scroll through, then back to the kernel cell.
  for (let i = 0; i < 30; i++) {
    await scroller.evaluate(node => node.scrollBy(0, node.clientHeight));
    await page.waitForTimeout(50);
  }
  const views = await panel.locator('.tnb-kernel-view').count();
  // The stored notebook keeps no output of the `--cuda --lowered` cell (NBVAL_SKIP): a live run may add its view.
  check(views >= expected.views, `ran all cells in ${((Date.now() - runStart) / 1000).toFixed(0)} s: ${views} kernel views (${expected.views} stored)`);
  check((await panel.locator('.tnb-kernel-view .tnb-warnings').count()) === 0, 'live kernel views have no warnings');
  const marked = await panel.locator('.jp-CodeCell.tnb-tilekernel-cell').count();
  check(marked === expected.tileCells, `${marked} of ${expected.tileCells} %%tilekernel cells are marked`);

  const kernelCell = panel.locator('.jp-CodeCell', { hasText: "M, N, K = T.const('M, N, K')" }).first();
  await kernelCell.scrollIntoViewIfNeeded();
  await scroller.evaluate((node, cell) => node.scrollBy(0, cell.getBoundingClientRect().top - node.getBoundingClientRect().top - 8), await kernelCell.elementHandle());
  const view = kernelCell.locator('.tnb-kernel-view');
  await view.waitFor({ state: 'visible' });
  check((await view.locator('.tnb-name').textContent()) === 'gemm', 'the kernel cell shows the gemm view');
  check(
    (await kernelCell.locator('.cm-content').getAttribute('data-language')) === 'python',
    'the %%tilekernel cell is highlighted as Python'
  );

  // Row alignment: each row's two sides have the same top and height; equal lines share a row.
  const rows = await gridRows(view);
  const misaligned = rows.filter(([l, r]) => Math.abs(l.top - r.top) > 0.5 || Math.abs(l.height - r.height) > 0.5);
  check(rows.length >= 16 && misaligned.length === 0, `${rows.length} rows, both sides aligned in each`);
  const sameRow = rows.filter(([l, r]) => l.text !== null && l.text === r.text).map(([l]) => l.text.trim());
  check(sameRow.includes(sameRow.find(t => t.startsWith('T.tile.copy(C['))) && sameRow.length >= 8, `${sameRow.length} identical lines, each on one row`);
  check(rows.every(([l, r]) => l.width > 300 && r.width > 300), 'both sides are wide');

  // Line mapping, cell -> views: hover the T.copy(A...) line of the cell.
  const copyLine = kernelCell.locator('.cm-line', { hasText: 'T.copy(A[bx * block_M, k * block_K], A_shared)' });
  await copyLine.hover();
  await page.waitForTimeout(200);
  const mappedText = async (v, side) =>
    v.locator(`.tnb-line.tnb-mapped[data-section="${side}"] .tnb-text`).allTextContents();
  const left = await mappedText(view, 'template');
  const right = await mappedText(view, 'specialized');
  check(
    left.length === 1 && left[0].trim().startsWith('T.tile.copy(A_shared') && right.length === 1 && right[0].trim().startsWith('T.tile.copy(A_shared'),
    `hovering the cell's T.copy(A...) line highlights its T.tile.copy line in phase 1 and phase 2`
  );
  const status = await view.locator('.tnb-source-status').textContent();
  check(/^source line 14: T\.copy\(A\[/.test(status), `the view names the source line (${status})`);
  // The view of gemm.show(...) in a later cell shows the same kernel: it follows this cell too.
  const showView = panel.locator('.jp-CodeCell', { hasText: 'gemm.show(M=256' }).locator('.tnb-kernel-view');
  check((await mappedText(showView, 'specialized')).length === 1, "gemm.show(...)'s view follows the kernel cell too");

  // Clicking pins; the pin survives the pointer leaving.
  const kernelLine = kernelCell.locator('.cm-line', { hasText: 'with T.Kernel(' });
  await kernelLine.click();
  await page.mouse.move(5, 500);
  await page.waitForTimeout(200);
  const launches = await mappedText(view, 'template');
  check(
    launches.length === 3 && launches.every(t => t.includes('T.launch_thread(')),
    'clicking the T.Kernel line pins its three thread launches'
  );

  // Line mapping, view -> cell: hover the phase-2 gemm line; the cell's T.gemm line lights up.
  const gemmIr = view.locator('.tnb-line[data-section="specialized"]', { hasText: 'T.tile.gemm(' });
  await gemmIr.hover();
  await page.waitForTimeout(200);
  const lit = await kernelCell.locator('.cm-line.tnb-source-line').allTextContents();
  check(lit.length === 1 && lit[0].trim() === 'T.gemm(A_shared, B_shared, C_local)', `hovering an IR line highlights its cell line (${lit})`);
  check((await mappedText(view, 'template')).some(t => t.trim().startsWith('T.tile.gemm(')), '...and the same line in phase 1');

  // The screenshot for docs/: the kernel cell and its view, with the mapping of the T.gemm line showing.
  const box = await kernelCell.boundingBox();
  const clip = { x: Math.max(0, box.x - 8), y: Math.max(0, box.y - 4), width: Math.min(1440 - box.x + 8, box.width + 16), height: Math.min(980 - box.y, box.height + 8) };
  await page.screenshot({ path: path.join(output, 'line-mapping.png'), clip });
  await page.mouse.move(5, 500);

  // 4. Line mapping into the lowered TIRx and the CUDA source: the `--cuda --lowered` view of the same kernel
  //    follows the kernel cell; clicking the cell's T.copy(A...) line pins it there too.
  const cudaCell = panel.locator('.jp-CodeCell', { hasText: '--cuda --lowered' }).first();
  const cudaView = cudaCell.locator('.tnb-kernel-view');
  await kernelCell.scrollIntoViewIfNeeded();
  await copyLine.click();
  await page.mouse.move(5, 500);
  await cudaCell.scrollIntoViewIfNeeded();
  await cudaView.waitFor({ state: 'visible' });
  const badge = async tab => (await cudaView.locator(`.tnb-tab[data-tab="${tab}"] .tnb-tab-count`).textContent().catch(() => '')) ?? '';
  const counts = { lowered: Number(await badge('lowered')), cuda: Number(await badge('cuda')) };
  check(counts.lowered > 0 && counts.cuda > 0, `the pinned T.copy(A...) line maps to ${counts.lowered} lowered IR and ${counts.cuda} CUDA lines (tab badges)`);
  for (const [tab, pattern] of [['lowered', /tnb_tma_load_2d/], ['cuda', /tnb_tma_load_2d/]]) {
    await cudaView.locator(`.tnb-tab[data-tab="${tab}"]`).click();
    await page.waitForTimeout(200);
    const texts = await mappedText(cudaView, tab);
    check(texts.length === counts[tab] && texts.some(t => pattern.test(t)), `the ${tab} tab highlights ${texts.length} lines, the TMA loads among them`);
  }
  // ... and back: hovering a highlighted CUDA line names the kernel line it came from and lights it in the cell.
  await cudaView.locator('.tnb-line.tnb-mapped[data-section="cuda"]').first().hover();
  await page.waitForTimeout(200);
  const cudaStatus = await cudaView.locator('.tnb-source-status').textContent();
  check(/^source line 14: T\.copy\(A\[/.test(cudaStatus), `a CUDA line names its source line (${cudaStatus})`);
  const cudaBox = await cudaView.boundingBox();
  await page.screenshot({
    path: path.join(output, 'line-mapping-cuda.png'),
    clip: { x: Math.max(0, cudaBox.x - 8), y: Math.max(0, cudaBox.y - 4), width: Math.min(1440 - cudaBox.x + 8, cudaBox.width + 16), height: Math.min(980 - Math.max(0, cudaBox.y - 4), cudaBox.height + 8) }
  });
  await page.mouse.move(5, 500);

  check(errors.length === 0, `no page errors from the extension (${errors.join(' | ')})`);
  console.log(`${checks.length} checks passed in ${((Date.now() - started) / 1000).toFixed(0)} s`);
} catch (error) {
  console.error(String(error));
  if (page) {
    await page.screenshot({ path: path.join(output, 'failure.png') }).catch(() => undefined);
  }
  process.exitCode = 1;
} finally {
  await browser.close();
}
