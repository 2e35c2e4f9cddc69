import type { Handlers } from '../../platform/http/handler.ts';
import { notFound, PROBLEM_TYPES, problemTypeUri } from '../../platform/http/problem.ts';

const BY_NAME = new Map(PROBLEM_TYPES.map((problemType) => [problemType.name, problemType]));

/** The problem types a problem document's `type` URI resolves to (spec: `getProblemType`). */
export const problemHandlers = {
  async getProblemType({ params }) {
    const problemType = BY_NAME.get(params.name);
    if (!problemType) throw notFound('The problem type');
    const { name, status, title, description, codes } = problemType;
    return {
      status: 200,
      body: { type: problemTypeUri(name), title, status, description, codes: codes.map(({ code, description }) => ({ code, description })) },
    };
  },
} satisfies Partial<Handlers>;
