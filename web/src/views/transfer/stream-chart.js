// One line per stream of one metric of the page's telemetry store (telemetry.js: the
// samples of /transfers/{id}/streams and of the live feed), with the event ticks: the
// transfer page's throughput, cwnd, RTT and cap charts are each one of these.

import { TimeChart } from '../../charts.js';
import { Frame } from '../../telemetry.js';

/** @typedef {import('../../telemetry.js').TelemetryStore} TelemetryStore */
/** One line per stream, in the store's order. @typedef {{label: string, stroke: string}[]} Series */
/** The event ticks of the timelines (seconds). @typedef {() => {t: number, kind: string}[]} Marks */
/** @typedef {ConstructorParameters<typeof TimeChart>[1]} ChartOptions */

export class StreamChart {
  /**
   * @param {HTMLElement} box where the chart goes
   * @param {string} metric the store's column (telemetry.js METRICS)
   * @param {ChartOptions} options
   */
  constructor(box, metric, options) {
    this.box = box;
    this.metric = metric;
    this.frame = new Frame();
    this.chart = new TimeChart(box, options);
  }

  /** @param {TelemetryStore} store @param {Series} series */
  draw(store, series) {
    this.chart.draw(series, this.frame.build(store, this.metric));
  }

  resize() {
    this.chart.resize();
  }

  destroy() {
    this.chart.destroy();
  }
}
