import type { Handlers } from '../../platform/http/handler.ts';

export const healthHandlers = {
  async getLiveness() {
    return { status: 200, body: { status: 'ok' } };
  },
  async getReadiness({ services: { db } }) {
    const ready = await db.isReady();
    return ready ? { status: 200, body: { status: 'ok', database: true } } : { status: 503, body: { status: 'unavailable', database: false } };
  },
} satisfies Partial<Handlers>;
