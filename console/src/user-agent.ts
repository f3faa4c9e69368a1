// "Chrome on Linux" from a User-Agent header: the browser and the system of the common ones, tested
// in the order that keeps each from matching another's tokens (Edge and Opera say Chrome too, every
// Chromium says Safari, an iPad says Mac OS X, Android says Linux). Anything else is shown as sent.

const BROWSERS: [RegExp, string][] = [
  [/\bEdg(e|A|iOS)?\//, 'Edge'],
  [/\bOPR\/|\bOpera\b/, 'Opera'],
  [/\bSamsungBrowser\//, 'Samsung Internet'],
  [/\bFirefox\/|\bFxiOS\//, 'Firefox'],
  [/\bHeadlessChrome\//, 'Chrome (headless)'],
  [/\bChromium\//, 'Chromium'],
  [/\bChrome\/|\bCriOS\//, 'Chrome'],
  [/\bVersion\/[\d.]+.*\bSafari\//, 'Safari'],
  [/^curl\//, 'curl'],
]

const SYSTEMS: [RegExp, string][] = [
  [/\bWindows NT\b/, 'Windows'],
  [/\biPhone|\biPad|\biPod/, 'iOS'],
  [/\bAndroid\b/, 'Android'],
  [/\bCrOS\b/, 'ChromeOS'],
  [/\bMac OS X\b|\bMacintosh\b/, 'macOS'],
  [/\bLinux\b/, 'Linux'],
]

const first = (table: [RegExp, string][], userAgent: string) =>
  table.find(([pattern]) => pattern.test(userAgent))?.[1]

/** "Firefox on Windows", "Safari on iOS", "Chrome"; the header itself when nothing is recognised. */
export function deviceName(userAgent: string | null): string {
  if (!userAgent) return 'Unknown device'
  const browser = first(BROWSERS, userAgent)
  const system = first(SYSTEMS, userAgent)
  if (browser && system) return `${browser} on ${system}`
  if (browser || system) return browser ?? system ?? ''
  return userAgent.length > 60 ? `${userAgent.slice(0, 57)}…` : userAgent
}
