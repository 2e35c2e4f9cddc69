// The scenario with the functions orval generates (fetch client, ./orval-fetch.ts as its fetch).
import {
  createDepartment,
  createNotification,
  createUser,
  listNotifications,
  listNotificationSettings,
  listRoles,
  login,
  updateNotification,
  uploadProfilePicture,
} from '../.generated/orval/atrium.ts';
import { ADMIN_PASSWORD, check, eventually, PNG_1X1, RUN, TENANT } from './environment.ts';
import { useToken } from './orval-fetch.ts';

const signIn = await login({ tenant: TENANT, username: 'admin', password: ADMIN_PASSWORD });
check(signIn.status === 200, `sign in: ${signIn.status}`);
useToken(signIn.data.access_token);

const settings = await listNotificationSettings();
check(settings.status === 200, 'list notification settings');
const department = await createDepartment({
  name: `Clients ${RUN}`,
  tags: ['sdk'],
  notification_setting_ids: settings.data.flatMap((setting) => (setting.id === undefined ? [] : [setting.id])),
});
check(department.status === 201, `create department: ${department.status}`);
// A create answer holds every field of the record.
const departmentId = department.data.id;

// A list's records may lack any field (selects may leave it out): the program checks what it uses.
const roles = await listRoles({ selects: 'id,name' });
const employeeId = roles.status === 200 ? roles.data.find((role) => role.name === 'Employee')?.id : undefined;
check(employeeId, 'the Employee role');

const password = 'client scenario password';
const user = await createUser({
  username: `client-${RUN}`,
  password,
  first_name: 'Client',
  last_name: RUN,
  role_id: employeeId,
  department_ids: [departmentId],
});
check(user.status === 201, `create user: ${user.status} ${JSON.stringify(user.data)}`);
const picture = await uploadProfilePicture(user.data.id, { profile_picture: new File([PNG_1X1], 'me.png', { type: 'image/png' }) });
check(picture.status === 200 && picture.data.profile_picture_url, `upload the picture: ${picture.status} ${JSON.stringify(picture.data)}`);

const sent = await createNotification({ title: `Hello ${RUN}`, body: 'From a typed client', url: '/', department_ids: [departmentId] });
check(sent.status === 202, `notify: ${sent.status}`);

const recipientSignIn = await login({ tenant: TENANT, username: `client-${RUN}`, password });
check(recipientSignIn.status === 200, 'recipient signs in');
useToken(recipientSignIn.data.access_token);
const notification = await eventually('the notification arrives', async () => {
  const list = await listNotifications({ filter: { unread: true } });
  return list.status === 200 ? list.data.find((item) => item.data?.title === `Hello ${RUN}`)?.id : undefined;
});
const read = await updateNotification(notification, { read_at: new Date().toISOString().replace('T', ' ').slice(0, 19) });
check(read.status === 200 && read.data.data.read_at, `mark as read: ${read.status}`);
console.log(`orval scenario passed (user ${user.data.id}, notification ${notification})`);
