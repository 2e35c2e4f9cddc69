import type { Handlers } from '../../platform/http/handler.ts';
import { notFound } from '../../platform/http/problem.ts';
import { present } from '../../platform/result-controls/result-controls.ts';
import { findUser, userView } from './view.ts';

export const userHandlers = {
  async getCurrentUser({ auth, services: { db } }) {
    const [user] = await db.tenant(auth.tenantId, async (tx) => {
      const row = await findUser(tx, auth.userId);
      if (!row) throw notFound('The user');
      return present(userView, tx, [row], { selects: null, relations: ['role', 'language'] }, auth);
    });
    return { status: 200, body: user! };
  },
} satisfies Partial<Handlers>;
