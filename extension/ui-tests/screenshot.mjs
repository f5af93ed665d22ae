// Browser test of tile-nb-labextension in a running JupyterLab (started by run.py).
//
// Opens ui-tests/fixtures/kernel_view.ipynb, checks that the kernel view renders (side-by-side IR,
// changed lines, tabs, synchronized scrolling) and that the %%tilekernel cell is marked and highlighted
// as Python, and writes screenshots to $TNB_OUTPUT. Exits non-zero on the first failed check.
// Uses Debian's Chromium through playwright-core; never downloads a browser.
import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// The fixture notebook's kernel view is tile_nb's real output (make_fixture.py): expectations come from it.
const here = path.dirname(fileURLToPath(import.meta.url));
const payload = JSON.parse(readFileSync(path.join(here, 'fixtures', 'gemm_payload.json'), 'utf8'));
const sectionText = id => payload.sections.find(s => s.id === id).text.split('\n');
const expectedChanged = payload.sections.find(s => s.id === 'specialized').changed_lines;
const expectedTabs = [
  'Template ↔ Specialized',
  ...payload.sections.filter(s => !['template', 'specialized'].includes(s.id)).map(s => s.title)
];
// A line that is the same, and unique, in both IRs but at different places (lines were dropped above it),
// as far down as both panes can still scroll to (the panes show about 3 lines at 60 px): the scroll check's anchor.
const scrollPair = (() => {
  const [a, b] = [sectionText('template'), sectionText('specialized')];
  let best = null;
  a.forEach((line, i) => {
    const j = b.indexOf(line);
    const unique = a.indexOf(line) === a.lastIndexOf(line) && j === b.lastIndexOf(line);
    if (unique && j >= 0 && j !== i && i <= a.length - 5 && j <= b.length - 5) {
      best = [i, j];
    }
  });
  return best;
})();

const base = process.env.TNB_LAB_URL;
const token = process.env.TNB_LAB_TOKEN;
const output = process.env.TNB_OUTPUT ?? 'ui-tests/output';
const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
if (!base || !token) {
  console.error('TNB_LAB_URL and TNB_LAB_TOKEN must be set (run ui-tests/run.py)');
  process.exit(2);
}

const checks = [];
function check(ok, message) {
  checks.push(message);
  if (!ok) {
    throw new Error(`check failed: ${message}`);
  }
  console.log(`ok - ${message}`);
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
let page;
try {
  const context = await browser.newContext({ viewport: { width: 1440, height: 1040 }, deviceScaleFactor: 1 });
  page = await context.newPage();
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  page.on('console', message => {
    if (message.type() === 'error' && /tile|tnb/i.test(message.text())) {
      errors.push(message.text());
    }
  });

  await page.goto(`${base}/lab/tree/kernel_view.ipynb?reset&token=${token}`);
  const view = page.locator('.jp-TileNbKernelRenderer .tnb-kernel-view');
  await view.waitFor({ state: 'visible', timeout: 90_000 });
  // Hide toasts (news, kernel messages) and collapse the file browser so the notebook fills the page.
  await page.addStyleTag({ content: '.Toastify { display: none !important; }' });
  const leftTab = page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current');
  if (await leftTab.count()) {
    await leftTab.first().click();
  }

  // Kernel view: summary, side-by-side panes, changed lines.
  check((await view.locator('.tnb-name').textContent()) === 'gemm', 'kernel view shows the kernel name');
  check((await view.locator('.tnb-warnings').count()) === 0, 'sample payload renders without warnings');
  const template = view.locator('.tnb-pane-template .tnb-code');
  const specialized = view.locator('.tnb-pane-specialized .tnb-code');
  const left = await template.boundingBox();
  const right = await specialized.boundingBox();
  check(left && right && left.x + left.width <= right.x && Math.abs(left.y - right.y) < 2, 'template and specialized side by side');
  const changed = await view.locator('.tnb-pane-specialized .tnb-line.tnb-changed').evaluateAll(rows =>
    rows.map(row => Number(row.dataset.line))
  );
  check(
    changed.length > 0 && JSON.stringify(changed) === JSON.stringify(expectedChanged),
    `specialized changed lines highlighted (${changed})`
  );
  const bg = await view
    .locator('.tnb-pane-specialized .tnb-line.tnb-changed')
    .first()
    .evaluate(row => getComputedStyle(row).backgroundColor);
  check(bg !== 'rgba(0, 0, 0, 0)' && bg !== 'transparent', `changed line has a background (${bg})`);

  // %%tilekernel cell: marker, badge, Python highlighting; the ordinary cell has none of it.
  const tileCell = page.locator('.jp-CodeCell.tnb-tilekernel-cell');
  check((await tileCell.count()) === 1, 'exactly one cell is marked as a %%tilekernel cell');
  check((await tileCell.locator('.cm-line.tnb-tilekernel-line').count()) === 1, 'the magic line is decorated');
  check(await tileCell.locator('.tnb-tilekernel-badge').isVisible(), 'the "tile kernel" badge is visible');
  const language = await tileCell.locator('.cm-content').getAttribute('data-language');
  check(language === 'python', `the %%tilekernel cell editor language is python (${language})`);
  const colors = await tileCell.locator('.cm-content').evaluate(content => {
    const spans = Array.from(content.querySelectorAll('span'));
    const def = spans.find(s => s.textContent === 'def');
    const plain = content.querySelectorAll('.cm-line')[2];
    return { def: def ? getComputedStyle(def).color : null, plain: plain ? getComputedStyle(plain).color : null };
  });
  check(colors.def !== null && colors.def !== colors.plain, `"def" is highlighted (${colors.def} vs ${colors.plain})`);
  const plainCell = page.locator('.jp-CodeCell:not(.tnb-tilekernel-cell)');
  check((await plainCell.locator('.tnb-tilekernel-badge').count()) === 0, 'an ordinary cell has no marker');

  // Screenshots: the notebook (for docs/) and the kernel view alone.
  await page.mouse.move(0, 0);
  await page.waitForTimeout(500);
  const notebook = page.locator('.jp-NotebookPanel:visible').first();
  await notebook.screenshot({ path: path.join(output, 'notebook.png') });
  await view.screenshot({ path: path.join(output, 'kernel-view.png') });

  // Tabs.
  const tabs = await view.locator('.tnb-tab').allTextContents();
  check(JSON.stringify(tabs) === JSON.stringify(expectedTabs), `tabs: ${tabs}`);
  await view.locator('.tnb-tab[data-tab="cuda"]').click();
  check(await view.locator('.tnb-panel[data-tab="cuda"]').isVisible(), 'CUDA tab shows its panel');
  check(!(await view.locator('.tnb-panel[data-tab="ir"]').isVisible()), 'the IR panel is hidden meanwhile');
  await view.screenshot({ path: path.join(output, 'cuda-tab.png') });
  await view.locator('.tnb-tab[data-tab="ir"]').click();

  // Synchronized scrolling: make the panes short enough to scroll, scroll the template, the other follows.
  check(scrollPair !== null, `the fixture has a line to check scrolling with (${scrollPair})`);
  const [leftLine, rightLine] = scrollPair;
  await page.addStyleTag({ content: '.jp-TileNbKernelRenderer { --tnb-code-max-height: 60px; }' });
  await template.evaluate((node, index) => {
    const lineHeight = node.querySelector('.tnb-line').getBoundingClientRect().height;
    node.scrollTop = index * lineHeight; // template line index+1 is the same line of the specialized IR
  }, leftLine);
  await page.waitForTimeout(300);
  const tops = await page.evaluate(() => {
    const [l, r] = document.querySelectorAll('.jp-TileNbKernelRenderer .tnb-code');
    const h = l.querySelector('.tnb-line').getBoundingClientRect().height;
    return { left: l.scrollTop / h, right: r.scrollTop / h };
  });
  check(
    Math.abs(tops.left - leftLine) < 0.1 && Math.abs(tops.right - rightLine) < 0.1,
    `scrolling is synchronized by line (${JSON.stringify(tops)}, expected ${leftLine} -> ${rightLine})`
  );
  await view.screenshot({ path: path.join(output, 'scrolled.png') });

  // Typing the magic into an ordinary cell marks it; removing it unmarks it.
  const plainEditor = plainCell.locator('.cm-content');
  await plainEditor.click();
  await page.keyboard.press('Control+Home');
  await page.keyboard.type('%%tilekernel --cpu\n');
  await page.locator('.jp-CodeCell.tnb-tilekernel-cell').nth(1).waitFor({ timeout: 10_000 });
  check((await page.locator('.jp-CodeCell.tnb-tilekernel-cell .tnb-tilekernel-badge').count()) === 2, 'typing %%tilekernel marks a cell');
  await page.keyboard.press('Control+a');
  await page.keyboard.type('x = 1  # an ordinary cell: no tile kernel marker');
  await page.waitForTimeout(300);
  check((await page.locator('.jp-CodeCell.tnb-tilekernel-cell').count()) === 1, 'removing the magic unmarks the cell');
  await page.keyboard.press('Escape');

  // Other notebooks with stored outputs (run.py --notebook): every view renders cleanly, every magic cell is marked.
  for (const extra of JSON.parse(process.env.TNB_EXTRA_NOTEBOOKS ?? '[]')) {
    await page.goto(`${base}/lab/tree/${encodeURIComponent(extra.name)}?token=${token}`);
    const panel = page.locator('.jp-NotebookPanel:visible').first();
    await panel.locator('.jp-Cell').first().waitFor({ state: 'visible', timeout: 60_000 });
    await page.addStyleTag({ content: '.Toastify { display: none !important; }' });
    if (extra.views > 0) {
      await panel.locator('.tnb-kernel-view').first().waitFor({ state: 'attached', timeout: 60_000 });
    }
    // Windowed notebooks attach cells lazily: scroll through so that every cell is rendered.
    const scroller = panel.locator('.jp-WindowedPanel-outer');
    for (let i = 0; i < 40; i++) {
      await scroller.evaluate(node => node.scrollBy(0, node.clientHeight));
      await page.waitForTimeout(100);
    }
    const views = await panel.locator('.tnb-kernel-view').count();
    check(views === extra.views, `${extra.name}: ${views} of ${extra.views} kernel views rendered`);
    const warned = await panel.locator('.tnb-kernel-view .tnb-warnings').allTextContents();
    check(warned.length === 0, `${extra.name}: no payload warnings (${warned.join(' | ')})`);
    const marked = await panel.locator('.jp-CodeCell.tnb-tilekernel-cell').count();
    check(marked === extra.tileCells, `${extra.name}: ${marked} of ${extra.tileCells} %%tilekernel cells marked`);
    await panel.locator('.tnb-kernel-view').first().scrollIntoViewIfNeeded();
    await panel.screenshot({ path: path.join(output, `${extra.name.replace(/\W+/g, '_')}.png`) });
  }

  check(errors.length === 0, `no page errors from the extension (${errors.join(' | ')})`);
  console.log(`${checks.length} checks passed`);
} catch (error) {
  console.error(String(error));
  if (page) {
    await page.screenshot({ path: path.join(output, 'failure.png') }).catch(() => undefined);
  }
  process.exitCode = 1;
} finally {
  await browser.close();
}
